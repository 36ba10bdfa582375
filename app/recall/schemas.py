from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from app.common import (
    INSTANT_RANGE,
    NO_NUL,
    Instant,
    Integer,
    JsonObject,
    MemoryType,
    Phrase,
    Source,
    StrictModel,
    Tag,
    Text,
    Vector,
    given,
    integral,
)
from app.entities.extract import MAX_ENTITY_CHARS, normalise
from app.entities.schemas import EntityAsked
from app.timeframes.validity import INCLUDE_DESCRIPTION, VALID_AT_DESCRIPTION, Include
from app.visibility import Name

Strategy = Literal["vector", "fulltext", "hybrid"]
EmbeddingState = Literal["ready", "unavailable", "not_needed"]
MAX_FILTER_ENTITIES = 20


class RecallFilters(StrictModel):
    types: list[MemoryType] | None = Field(default=None, description="Any of these types")
    tags_any: list[Tag] | None = Field(default=None, description="At least one of these tags")
    tags_all: list[Tag] | None = Field(default=None, description="All of these tags")
    min_importance: float | None = Field(default=None, ge=0, le=10)
    min_confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Only memories whose `confidence` is at least this (one without: left out)",
    )
    sources: list[Source] | None = Field(
        default=None, max_length=20, description="Only memories of any of these `source`s"
    )
    metadata: JsonObject | None = Field(
        default=None, description="JSON containment: the memory's metadata includes this object"
    )
    entities: list[EntityAsked] | None = Field(
        default=None,
        max_length=MAX_FILTER_ENTITIES,
        description="Memories naming any of these entities (a person, a name, a code; any "
        "case; an alias stands for its entity): `GET …/entities`",
    )

    @field_validator("entities")
    @classmethod
    def _entity_keys(cls, names: list[str] | None) -> list[str] | None:
        for name in names or ():
            if not 1 <= len(normalise(name)) <= MAX_ENTITY_CHARS:
                raise ValueError(f"{name!r} is no entity once normalised")
        return names


class FusionOptions(StrictModel):
    """How hybrid fuses its vector and full-text lists; an absent field takes the
    deployment's default (HTM_RECALL_* settings: docs/configuration.md)."""

    method: Literal["rrf", "score"] | None = Field(
        default=None,
        description="rrf: Σ weight / (k + rank); score: a convex combination of each list's "
        "normalised raw scores",
    )
    k: Annotated[int, Field(ge=1, le=1000), BeforeValidator(integral)] | None = Field(
        default=None, description="RRF's k"
    )
    vector_weight: float | None = Field(default=None, ge=0, le=100)
    fulltext_weight: float | None = Field(default=None, ge=0, le=100)
    normalization: Literal["minmax", "zscore"] | None = Field(
        default=None, description="score fusion: how each list's raw scores are normalised"
    )
    candidates: Annotated[int, Field(ge=1, le=1000), BeforeValidator(integral)] | None = Field(
        default=None, description="How deep each list is read (≥ limit)"
    )
    turn_spread: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="A conversation turn (metadata `session`) gains this share of the fused "
        "score of the turn just before or just after it in its session (the larger, when that "
        "turn is a candidate too), relative to the best candidate's; 0: off",
    )


class SignalOptions(StrictModel):
    """Relevance signals blended into hybrid's score, each weight in [0, 1], together at most
    1: score = (1 − Σw)·fused/max(fused) + Σ w·signal. Absent fields take the deployment's
    defaults."""

    recency: float | None = Field(
        default=None, ge=0, le=1, description="Weight of 0.5^(age / half-life)"
    )
    half_life_days: float | None = Field(default=None, gt=0, le=36_500)
    importance: float | None = Field(
        default=None, ge=0, le=1, description="Weight of importance / 10"
    )
    tag_overlap: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Weight of the fraction of `tags` the memory carries (or a descendant of)",
    )
    tags: list[Tag] | None = Field(default=None, description="The tags the question is about")
    access: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Weight of ln(1 + accesses) / ln(101), at most 1: how often the memory was "
        "recalled or read",
    )


class RecallRequest(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "What did we decide about the staging database?",
                    "strategy": "hybrid",
                    "limit": 10,
                    "timeframe": "last month",
                    "scope": "all",
                    "filters": {"tags_any": ["infra"]},
                }
            ]
        },
    )

    # Fusion and signals shape hybrid's score: asked of another strategy, a 422
    # (fusion.check_hybrid_only); the spec says so too.
    schema_rules = (
        {
            "if": given("strategy", {"enum": ["vector", "fulltext"]}),
            "then": {"properties": {"fusion": {"type": "null"}, "signals": {"type": "null"}}},
        },
    )

    query: Text = Field(min_length=1, description="A question or keywords, as the agent asks")
    strategy: Strategy = "hybrid"
    limit: Integer = Field(
        default=10,
        ge=1,
        description='At most max_recall_limit (default 100); why 10: README, "Recall\'s defaults"',
    )
    timeframe: Phrase | None = Field(
        default=None,
        description="ISO-8601 or a phrase: 'last week', 'since 2025-01-01', 'yesterday', ...; "
        "'auto' takes the time phrase out of the query ('what did we decide last week "
        "about the schema')",
    )
    scope: Literal["self", "all"] = Field(
        default="all", description="self: memories this robot authored; all: the namespace's"
    )
    filters: RecallFilters = Field(default_factory=RecallFilters)
    pools: list[Name] = Field(
        default_factory=list,
        max_length=20,
        description="Also search these pools (each one the robot may read: 403 otherwise); "
        "`scope` applies within them too. Without it, a recall reads no pool",
    )
    embedding: Vector | None = Field(
        default=None,
        description="Client-supplied query vector (skips the embedder): elements within "
        "±1e17, one at least 1e-18 in magnitude",
    )
    now: Instant | None = Field(
        default=None,
        description="Evaluate the timeframe as of this instant (default: now). "
        f"From {INSTANT_RANGE}",
    )
    load_into_working_memory: bool = Field(
        default=True, description="Place the hits in the robot's working memory"
    )
    wait_for_working_memory: bool | None = Field(
        default=None,
        description="Answer after the hits are loaded, with what the load did (`loaded`, "
        "`evicted`, `not_admitted`); false: answer first (`reason: pending`), a later read of "
        "working memory waits for the load. Default: HTM_RECALL_LOAD (background)",
    )
    fusion: FusionOptions | None = Field(default=None, description="hybrid only")
    signals: SignalOptions | None = Field(default=None, description="hybrid only")
    rerank: bool | None = Field(
        default=None,
        description="Reorder the top candidates with the configured reranker (default: on "
        "when one is configured); 422 when none is",
    )
    explain: bool = Field(default=False, description="Say how each hit's score was made")
    vector_query: Annotated[str, StringConstraints(min_length=1), NO_NUL] | None = Field(
        default=None,
        description="The vector list's own question (full text keeps `query`); default: the "
        "query without the names of the namespace's speakers (HTM_RECALL_VECTOR_QUERY)",
    )
    min_score: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Leave out hits whose `relevance` (cosine similarity to the question's "
        "vector) is below this; default HTM_RECALL_MIN_SCORE. Hits without a vector (strategy "
        "fulltext, an embedding still pending) are not judged",
    )
    neighbours: Integer = Field(
        default=0,
        ge=0,
        le=5,
        description="For each hit of a conversation (metadata `session`), up to this many "
        "turns of its session before it and after it, in `neighbours`",
    )
    valid_at: Phrase | None = Field(default=None, description=VALID_AT_DESCRIPTION)
    include: list[Include] = Field(default_factory=list, description=INCLUDE_DESCRIPTION)
    expand: Literal["related", "entities"] | None = Field(
        default=None,
        description="related: the top hits' related memories (one link away: shared tags, "
        "supersede, derived-from, explicit links) after the hits, in at most half of `limit`, "
        "each marked `via`; entities: in the same places, the memories naming an entity the "
        "question or the top hits name (a second hop), each marked `via`",
    )


class ListExplanation(BaseModel):
    rank: int | None = Field(
        description="The hit's rank on this list (1 = first); null: not among this list's "
        "candidates, and score fusion then scores it as the list would (`score`)"
    )
    score: float = Field(description="The list's raw score: similarity or ts_rank")
    share: float = Field(description="What this list added to the fused score")


class SignalExplanation(BaseModel):
    value: float = Field(description="The signal, in [0, 1]")
    weight: float
    contribution: float = Field(description="weight × value, added to the score")


class RerankExplanation(BaseModel):
    score: float
    rank: int
    fused_rank: int = Field(description="The hit's rank before reranking")


class ImportanceExplanation(BaseModel):
    written: float = Field(description="The importance its writer gave")
    learned: float = Field(
        description="What its use made of it (app/memories/learning.py): the importance "
        "signal's value × 10; `written` without a step"
    )
    used: int = Field(description="Feedback saying it was used: each a step α toward 10")
    unused: int = Field(description="Feedback saying it was not: each a step α toward 0")
    pinned: int = Field(
        default=0, description="Feedback saying it was pinned: each a step 2α toward 10"
    )
    forgotten_nearby: int = Field(
        default=0,
        description="Forgets of a memory it was among the nearest to (by vector): each a step "
        "α/2 toward 0",
    )


class HitExplanation(BaseModel):
    vector: ListExplanation | None
    fulltext: ListExplanation | None
    fused: float = Field(description="Σ of the lists' shares")
    relevance: float | None = Field(
        description="The hit's `relevance`: cosine similarity to the question's vector, what "
        "min_score compares; null without a vector"
    )
    scaled: float | None = Field(
        default=None,
        description="With signals: fused / the best candidate's fused, weighted by 1 − Σ "
        "signal weights (the fused score's part of `score`)",
    )
    signals: dict[str, SignalExplanation]
    rerank: RerankExplanation | None = None
    score: float
    newer: str | None = Field(
        default=None,
        description="The key of a hit of this page stating a newer value of the same subject "
        'and attribute ("Carla\'s favourite colour is purple now" after "...is green"): '
        "this one is placed below it whatever their scores",
    )
    confidence: float | None = Field(
        default=None,
        description="The memory's `confidence` (null: not said): what `min_confidence` compared; "
        "it does not change the score",
    )
    source: str | None = Field(
        default=None, description="The memory's `source` (null: not said): what `sources` matched"
    )
    importance: ImportanceExplanation | None = Field(
        default=None, description="The importance written and learned, and the feedback"
    )


class Neighbour(BaseModel):
    position: int = Field(description="−1: the turn just before the hit, 1: just after")
    key: str
    content: str
    speaker: str | None
    created_at: datetime


class RelatedVia(BaseModel):
    key: str | None = Field(
        description="The hit this memory is related to (expand entities: null when the "
        "question named the entity)"
    )
    type: str = Field(description="The link's type: related_to, supports, ...; or entity")
    entity: str | None = Field(
        default=None, description="With `expand: entities`: the entity it names"
    )


class RecallHit(BaseModel):
    key: str
    content: str
    type: str
    importance: float
    confidence: float | None = Field(default=None, description="As written; null: not said")
    source: str | None = Field(default=None, description="As written; null: not said")
    tags: list[str]
    metadata: dict[str, Any]
    author: str
    token_count: int
    created_at: datetime
    score: float = Field(
        description="The strategy's score; the order of hits, except that a newer statement "
        "of the same fact comes before an older one (its `explain` says `newer`)"
    )
    vector_rank: int | None
    vector_similarity: float | None = Field(description="1 − cosine distance")
    fulltext_rank: int | None
    fulltext_score: float | None
    relevance: float | None = Field(
        default=None,
        description="Cosine similarity of the memory to the question's vector (the vector "
        "query's): what min_score compares; null without a vector",
    )
    neighbours: list[Neighbour] | None = Field(
        default=None,
        description="With `neighbours` > 0 and a hit of a session: the turns around it, in "
        "order (position −n…−1 before, 1…n after)",
    )
    explain: HitExplanation | None = Field(default=None, description="With `explain: true`")
    via: RelatedVia | None = Field(
        default=None,
        description="With `expand`: a related hit, and what it is related to",
    )


class TimeframeRead(BaseModel):
    start: datetime | None
    end: datetime | None
    phrase: str | None = Field(
        default=None, description="With timeframe 'auto': the phrase found in the query"
    )


class FusionRead(BaseModel):
    method: Literal["rrf", "score"]
    k: int | None
    vector_weight: float
    fulltext_weight: float
    normalization: Literal["minmax", "zscore"] | None
    candidates: int = Field(description="How deep each list was read")
    turn_spread: float = Field(
        default=0.0, description="The share of a neighbouring turn's fused score a turn gained"
    )


class RecallWorkingMemory(BaseModel):
    loaded: list[str] = Field(description="Keys now in the robot's working memory")
    evicted: list[str] = Field(description="Keys evicted to make room")
    not_admitted: list[str] = Field(description="Keys too large for the budget or not placed")
    pending: list[str] = Field(
        default_factory=list,
        description="reason `pending`: the keys being loaded after this answer (a later read of "
        "working memory waits for the load; what it admitted and evicted shows there)",
    )
    reason: Literal["loaded", "pending", "unavailable", "skipped"] = "loaded"


class RecallResult(BaseModel):
    strategy: Strategy
    query: str
    searched: str = Field(description="The text searched: the query minus an auto timeframe")
    vector_query: str | None = Field(
        default=None,
        description="What the vector list searched, when not `searched` (a `vector_query`, or "
        "the query without speakers' names)",
    )
    speakers: list[str] = Field(
        default_factory=list,
        description="The namespace's speakers the query names (their memories get the speaker "
        "signal, hybrid)",
    )
    min_score: float = Field(description="The floor applied to hits' relevance")
    timeframe: TimeframeRead | None
    embedding: EmbeddingState = Field(
        description="unavailable: the embedder failed, so hybrid ran on full text only"
    )
    fusion: FusionRead | None = Field(description="hybrid: how the lists were fused")
    reranked: bool = Field(default=False, description="The reranker reordered the hits")
    hits: list[RecallHit]
    working_memory: RecallWorkingMemory
