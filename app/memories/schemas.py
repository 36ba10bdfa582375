from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from app.common import (
    INSTANT_RANGE,
    KEY_PATTERN,
    MAX_JSON_DEPTH,
    TAG_PATTERN,
    Instant,
    JsonObject,
    MemoryType,
    Source,
    StrictModel,
    Tag,
    Text,
    Vector,
    given,
)
from app.memories.learning import Kind, learned
from app.visibility import MAX_READERS, VISIBILITY_DESCRIPTION, Name, Visibility
from app.working_memory.schemas import WorkingMemoryOutcome

_EXAMPLE: dict[str, Any] = {
    "content": "The staging database is PostgreSQL 16 with pgvector 0.8.",
    "key": "staging-db-version",
    "type": "fact",
    "importance": 5,
    "confidence": 0.9,
    "source": "doc:ops-handbook",
    "tags": ["infra", "postgres"],
    "metadata": {"section": "databases"},
}

CONFIDENCE_DESCRIPTION = (
    "How sure the writer is that it holds, 0–1; null: not said. Recall and list filter on it "
    "(`min_confidence`: a memory without one is left out)"
)
SOURCE_DESCRIPTION = (
    'Where it came from: "user", "tool:web", "inference", "import"... (1–100 characters: '
    "letters, digits, space and `._:/@+-`, a letter or digit first); null: not said. Recall "
    "and list filter on it (`sources`, `source`)"
)


class MemoryFields(StrictModel):
    content: Text = Field(
        min_length=1, description="The memory's text (UTF-8 without NUL, size-limited)"
    )
    type: MemoryType = Field(
        default="fact", description="Free-form kind, e.g. fact, preference, decision, code"
    )
    importance: float = Field(default=1.0, ge=0, le=10, description="0–10; evicted lowest first")
    confidence: float | None = Field(default=None, ge=0, le=1, description=CONFIDENCE_DESCRIPTION)
    source: Source | None = Field(default=None, description=SOURCE_DESCRIPTION)
    tags: list[Tag] = Field(default_factory=list, description=f"Tags matching {TAG_PATTERN}")
    metadata: JsonObject = Field(
        default_factory=dict,
        description="Any JSON object without NUL characters, nested at most "
        f"{MAX_JSON_DEPTH} deep (the deployment's limit is usually lower)",
    )
    created_at: Instant | None = Field(
        default=None,
        description=f"For imports and backfill; default: now. From {INSTANT_RANGE}",
    )
    embedding: Vector | None = Field(
        default=None,
        description="Client-supplied vector of the deployment's dimension: elements within "
        "±1e17, one at least 1e-18 in magnitude",
    )
    valid_from: Instant | None = Field(
        default=None,
        description="When the fact became true (valid time); default: its `created_at`",
    )
    valid_to: Instant | None = Field(
        default=None,
        description="When it stops being true; default: open-ended. After `valid_from` (or "
        "`created_at`). Reads skip it from then on unless asked `valid_at` an earlier time",
    )

    visibility: Visibility | None = Field(default=None, description=VISIBILITY_DESCRIPTION)
    readers: list[Name] | None = Field(
        default=None,
        max_length=MAX_READERS,
        description="For a private memory: the other robots it grants reading (on PUT, absent "
        "keeps them)",
    )
    pool: Name | None = Field(
        default=None, description="Add it into this pool (the robot needs the pool's write grant)"
    )

    schema_rules = (
        {
            "if": given("pool", {"type": "string"}),
            "then": {"properties": {"visibility": {"enum": ["pool", None]}}},
        },
        {"if": given("visibility", {"const": "pool"}), "then": given("pool", {"type": "string"})},
        {
            "if": given("readers", {"type": "array", "minItems": 1}),
            "then": given("visibility", {"const": "private"}),
        },
    )

    @model_validator(mode="after")
    def _validity_ordered(self) -> MemoryFields:
        start = self.valid_from or self.created_at
        if self.valid_to is not None and start is not None and self.valid_to <= start:
            raise ValueError("valid_to must be after valid_from (or created_at)")
        if self.pool is not None and self.visibility not in (None, "pool"):
            raise ValueError("a memory in a pool has visibility pool")
        if self.visibility == "pool" and self.pool is None:
            raise ValueError("visibility pool needs `pool`")
        if self.readers and self.visibility != "private":
            raise ValueError("`readers` are for a private memory (visibility private)")
        return self


MAX_SUPERSEDES = 20


class MemoryCreate(MemoryFields):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE]})

    key: str | None = Field(
        default=None,
        pattern=KEY_PATTERN,
        description="Unique in the namespace; generated when absent. Letters, digits and "
        "`._:@-`, no `/` (a key is one segment of the memory's URL)",
    )
    dedupe: Literal["off", "exact", "semantic"] | None = Field(
        default=None,
        description="Near-duplicates (default: the deployment's HTM_DEDUPE). exact: a live "
        "memory of the same type with the same content; semantic: also one whose cosine "
        "similarity reaches `dedupe_threshold` (only exact while the embedding is pending). "
        "A duplicate is not stored: the existing memory is reinforced and named in "
        "`duplicate_of` (200), and a `key` given here is not claimed",
    )
    dedupe_threshold: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Cosine similarity for `dedupe: semantic` (default: HTM_DEDUPE_THRESHOLD, "
        "0.92)",
    )
    supersedes: list[Annotated[str, Field(pattern=KEY_PATTERN)]] = Field(
        default_factory=list,
        max_length=MAX_SUPERSEDES,
        json_schema_extra={"uniqueItems": True},
        description="Keys of current memories this one replaces: atomically with the add, "
        "each one's validity ends at this memory's `valid_from`, it is linked to it "
        "(`superseded_by`) and leaves every working memory. 404 when a key does not exist, "
        "409 when it is already superseded or a robot that reads it could not read this one "
        "(a successor covers its predecessor's audience)",
    )
    supersede: Literal["off", "propose", "apply"] | None = Field(
        default=None,
        description="What the supersession detector's findings do (default: HTM_SUPERSEDE): "
        "off: not looked for; propose: listed in `supersede_proposals` for the agent to "
        "confirm; apply: superseded as if named in `supersedes`",
    )

    @field_validator("supersedes")
    @classmethod
    def _once_each(cls, keys: list[str]) -> list[str]:
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"keys repeated: {', '.join(repeated)}")
        return keys


class MemoryUpsert(MemoryFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{k: v for k, v in _EXAMPLE.items() if k != "key"}]},
    )


class ImportanceChange(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"boost": 1.5}, {"confidence": 0.9, "source": "user"}]},
    )

    importance: float | None = Field(default=None, ge=0, le=10, description="The new value")
    boost: float | None = Field(
        default=None,
        ge=-10,
        le=10,
        description="Added to the current importance (negative: reduce), kept within 0–10",
    )
    confidence: float | None = Field(
        default=None, ge=0, le=1, description="The new confidence (null: clears it); absent: kept"
    )
    source: Source | None = Field(
        default=None, description="The new source (null: clears it); absent: kept"
    )

    schema_rules = (
        {
            "not": {
                "allOf": [
                    given("importance", {"type": "number"}),
                    given("boost", {"type": "number"}),
                ]
            }
        },
        {
            "anyOf": [
                given("importance", {"type": "number"}),
                given("boost", {"type": "number"}),
                {"required": ["confidence"]},
                {"required": ["source"]},
            ]
        },
    )

    @model_validator(mode="after")
    def _something_once(self) -> ImportanceChange:
        if self.importance is not None and self.boost is not None:
            raise ValueError("give at most one of `importance` and `boost`")
        if (
            self.importance is None
            and self.boost is None
            and not {"confidence", "source"} & self.model_fields_set
        ):
            raise ValueError("give `importance`, `boost`, `confidence` or `source`")
        return self


class MemoryFeedback(StrictModel):
    """One of `{"used": true}`, `{"used": false}`, `{"pinned": true}`."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"used": True}, {"pinned": True}],
            "oneOf": [{"required": ["used"]}, {"required": ["pinned"]}],
        },
    )

    # The spec says what may be sent: a boolean `used`, or `pinned` true (null is never
    # sent; the validator below refuses both, neither and a false pin).
    used: Annotated[bool | None, WithJsonSchema({"type": "boolean"})] = Field(
        default=None,
        description="true: the memory was of use (its learned importance takes a step α of "
        "the way toward 10); false: it was recalled or offered but of no use (α toward 0)",
    )
    pinned: Annotated[bool | None, WithJsonSchema({"type": "boolean", "const": True})] = Field(
        default=None,
        description="true: the agent pinned the memory, kept it at hand (in its own pinned "
        "notes, a scratchpad, a starred list): a step 2α of the way toward 10. Memories are "
        "not pinned in this service; a pinned note is a state key",
    )

    @model_validator(mode="after")
    def _one(self) -> MemoryFeedback:
        sent = self.model_fields_set  # exactly one field, never null, a pin only true
        if len(sent) != 1 or any(getattr(self, f) is None for f in sent) or self.pinned is False:
            raise ValueError('send one of {"used": true|false} and {"pinned": true}')
        return self

    @property
    def kind(self) -> Kind:
        if self.pinned:
            return "pinned"
        return "used" if self.used else "unused"


class FeedbackAccepted(BaseModel):
    key: str
    used: bool | None = Field(description="As sent; null for a pin")
    pinned: bool = False
    step: float = Field(
        description="The fraction of the way to 10 (used, pinned) or to 0 (not used) this "
        "feedback moves the learned importance: α, or 2α for a pin"
    )
    learning_rate: float = Field(description="α (HTM_IMPORTANCE_LEARNING_RATE)")


class MemoryBatchCreate(StrictModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"memories": [_EXAMPLE]}]}
    )

    memories: list[MemoryCreate] = Field(min_length=1)
    working_memory: bool = Field(
        default=True,
        description="false: store in long-term memory only, without placing the memories in "
        "the author's working memory (backfills and imports: a year of history would "
        "otherwise evict what the robot is focused on now, and pay for it); each memory's "
        "`working_memory.reason` is then `not_placed`",
    )


class MemoryRead(BaseModel):
    id: int
    key: str
    content: str
    type: str
    importance: float
    confidence: float | None = Field(default=None, description=CONFIDENCE_DESCRIPTION)
    source: str | None = Field(default=None, description=SOURCE_DESCRIPTION)
    tags: list[str]
    metadata: dict[str, Any]
    author: str = Field(description="The robot that added it")
    token_count: int
    embedding_status: Literal["ready", "pending", "failed"] = Field(
        description="pending: waiting for the embedding worker; failed: the provider could not "
        "embed it after the worker's last attempt (it stays out of vector search)"
    )
    embedding_model: str | None
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None
    version: int = Field(description="1 when added; every change through PUT adds one")
    access_count: int = Field(
        default=0,
        description="Retrieves, recall hits and duplicate adds counted so far (written about "
        "once a second, so a just-made access may not show yet)",
    )
    last_accessed_at: datetime | None = Field(default=None, description="The latest of them")
    learned_importance: float | None = Field(
        default=None,
        description="The importance its use taught (`POST …/feedback`, and memories near it "
        "forgotten; app/memories/learning.py), 0–10, beside the writer's `importance`; null: "
        "nothing learned yet (written about once a second, like `access_count`)",
    )
    used_count: int = Field(default=0, description="Feedback saying it was used")
    unused_count: int = Field(default=0, description="Feedback saying it was not")
    pinned_count: int = Field(default=0, description="Feedback saying it was pinned")
    forgotten_nearby_count: int = Field(
        default=0,
        description="Memories near it (by vector) a robot forgot: each a half step toward 0",
    )
    valid_from: datetime | None = Field(
        default=None, description="When the fact became true (its created_at unless set)"
    )
    valid_to: datetime | None = Field(
        default=None, description="When it stopped (or stops) being true; null: open-ended"
    )
    superseded_by: str | None = Field(
        default=None,
        description="The key of the memory that superseded this one; null also when the robot "
        "may not read that one",
    )
    archived: str | None = Field(
        default=None,
        description="Deleted by a retention policy, this rule's (idle, stale, superseded, "
        "expired: its task pool expired); restorable like any soft delete",
    )
    visibility: Visibility = Field(default="namespace", description="Who may read it")
    readers: list[str] = Field(
        default_factory=list, description="The robots a private memory grants reading"
    )
    pool: str | None = Field(default=None, description="The pool it is in")


class MemoryAdded(MemoryRead):
    created: bool = Field(
        description="False when an upsert updated an existing memory, or the add was a duplicate"
    )
    duplicate_of: str | None = Field(
        default=None,
        description="The add duplicated this memory (`dedupe`): nothing new was stored, and "
        "these are its fields after reinforcement",
    )
    working_memory: WorkingMemoryOutcome
    superseded: list[str] = Field(
        default_factory=list,
        description="Keys this add superseded (`supersedes`, or the detector's with "
        "`supersede: apply`)",
    )
    supersede_proposals: list[SupersedeProposal] = Field(
        default_factory=list,
        description="Current memories the detector found this one may replace, not "
        "superseded: send their keys in `supersedes` (or PUT with them) to confirm",
    )


class SupersedeProposal(BaseModel):
    key: str
    content: str
    rule: Literal["subject_attribute", "key_family", "statement", "semantic"] = Field(
        description="subject_attribute: the same metadata `subject` and `attribute`; "
        "key_family: the key's family (the part before its last `@`) or a key of it "
        "(`family@...`); statement: the same subject and attribute read from the two texts, "
        'another value ("Carla\'s favourite colour is purple now" after "...is green"); '
        "semantic: the nearest memory of the same type above "
        "HTM_SUPERSEDE_THRESHOLD (confirmed by the LLM when one is configured)"
    )
    similarity: float | None = Field(default=None, description="semantic: cosine similarity")


class MemoryVersionRead(BaseModel):
    version: int
    content: str
    type: str
    importance: float
    confidence: float | None = None
    source: str | None = None
    tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    token_count: int
    embedding_status: Literal["ready", "pending", "failed"] = Field(
        description="The embedding's status while this version was current"
    )
    embedding_model: str | None
    changed_by: str | None = Field(
        description="The robot that wrote this version (null: it no longer exists)"
    )
    changed_at: datetime = Field(description="When this version was written")
    current: bool = Field(description="This is the memory's current version")
    valid_from: datetime | None = Field(default=None, description="Its validity then")
    valid_to: datetime | None = None


class MemoryVersions(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "key": "staging-db-version",
                    "versions": [
                        {
                            **{k: v for k, v in _EXAMPLE.items() if k != "key"},
                            "version": 2,
                            "created_at": "2026-11-20T09:00:00Z",
                            "token_count": 16,
                            "embedding_status": "ready",
                            "embedding_model": "all-MiniLM-L6-v2",
                            "changed_by": "ops-bot",
                            "changed_at": "2026-11-24T10:00:00Z",
                            "current": True,
                        }
                    ],
                }
            ]
        }
    )

    key: str
    versions: list[MemoryVersionRead] = Field(description="Newest first")


class SupersedeLink(MemoryRead):
    depth: int = Field(
        description="0: the memory asked for; −1: what it superseded (−2: what that "
        "superseded...); 1: what superseded it (2: ...)"
    )


class MemoryHistory(BaseModel):
    key: str
    chain: list[SupersedeLink] = Field(
        description="The supersede chain the memory is part of, oldest link first; only "
        "itself when it superseded nothing and nothing superseded it"
    )


class MemoryBatchResult(BaseModel):
    memories: list[MemoryAdded]


def to_read(row: Any) -> MemoryRead:
    return MemoryRead(
        id=row.id,
        key=row.key,
        content=row.content,
        type=row.type,
        importance=row.importance,
        confidence=row.confidence,
        source=row.source,
        tags=list(row.tags),
        metadata=row.metadata,
        author=row.author,
        token_count=row.token_count,
        embedding_status=row.embedding_status,
        embedding_model=row.embedding_model,
        created_at=row.created_at,
        updated_at=row.updated_at,
        deleted_at=row.deleted_at,
        version=row.version,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        **feedback_fields(row.importance, getattr(row, "feedback", None)),
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        superseded_by=row.superseded_by,
        archived=getattr(row, "archived", None),
        visibility=getattr(row, "visibility", "namespace"),
        readers=list(getattr(row, "readers", None) or ()),
        pool=getattr(row, "pool", None),
    )


def feedback_fields(importance: float, feedback: Any) -> dict[str, Any]:
    """A read's learned importance and feedback counts, from FEEDBACK's array (None: none)."""
    return {
        "learned_importance": learned(importance, feedback),
        "used_count": int(feedback[2]) if feedback else 0,
        "unused_count": int(feedback[3]) if feedback else 0,
        "pinned_count": int(feedback[4]) if feedback else 0,
        "forgotten_nearby_count": int(feedback[5]) if feedback else 0,
    }


def _json_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_json_depth(v) for v in value), default=0)
    return 0
