"""The tools' inputs and outputs: compact on purpose, since every definition costs the model
context before the first call (tests/mcp/test_mcp_budget.py holds the totals). An input names
the fields an agent uses; each tool builds the REST request model from it, so the same rules
check it (and the REST API keeps every option). `robot` is optional everywhere: the
connection's default robot (the `X-Robot` header, or `htm mcp --robot`) when left out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from app.common import (
    KEY_PATTERN,
    NAME_PATTERN,
    Instant,
    JsonObject,
    MemoryType,
    Phrase,
    Source,
    Tag,
    Text,
)
from app.entities.schemas import EntityAsked
from app.prompt.schemas import Overflow
from app.relationships.schemas import LinkType
from app.snapshots.schemas import SnapshotName
from app.timeframes.validity import Include

Robot = Annotated[str, Field(pattern=NAME_PATTERN)]
Key = Annotated[str, Field(pattern=KEY_PATTERN)]
# A memory's key, or the alias `#<id>` an answer wrote for a made-up key (app/mcp/aliases.py).
MemoryKey = Annotated[str, Field(pattern=rf"^(?:#[0-9]{{1,19}}|{KEY_PATTERN[1:-1]})$")]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
ROBOT = "default: the connection's"


class In(BaseModel):
    model_config = ConfigDict(extra="forbid")
    aliased: ClassVar[tuple[str, ...]] = ()  # the fields naming memories: keys or aliases

    robot: Robot | None = Field(default=None, description=ROBOT)


class MemoryIn(In):
    """The fields a memory is written with (remember, memory_update)."""

    content: Text = Field(min_length=1, description="a sentence")
    type: MemoryType = Field(default="fact", description="fact, preference, event...")
    importance: float = Field(default=1.0, ge=0, le=10, description="evicted lowest first")
    confidence: float | None = Field(default=None, ge=0, le=1, description="how sure")
    source: str | None = Field(default=None, description="user, tool:web...")
    tags: list[Tag] = Field(default=[], description="a:b paths")
    metadata: JsonObject = Field(default={}, description="any JSON")
    valid_from: Instant | None = Field(default=None, description="default: now")
    visibility: Literal["namespace", "private", "group"] | None = Field(
        default=None, description="default namespace: every robot"
    )
    readers: list[Robot] | None = Field(default=None, description="private: also these")
    pool: Robot | None = Field(default=None, description="into this pool")


class RememberIn(MemoryIn):
    aliased: ClassVar[tuple[str, ...]] = ("supersedes",)

    key: Key | None = Field(default=None, description="default: made up")
    supersedes: list[MemoryKey] = Field(default=[], description="keys this replaces")


class RecallIn(In):
    query: Text = Field(min_length=1, description="what to find")
    limit: int = Field(default=10, ge=1, le=100, description="hits")
    strategy: Literal["hybrid", "vector", "fulltext"] = Field(default="hybrid", description="how")
    timeframe: Phrase | None = Field(default=None, description="'last week'...")
    tags: list[Tag] | None = Field(default=None, description="any of")
    min_confidence: float | None = Field(default=None, ge=0, le=1, description="at least")
    sources: list[str] | None = Field(default=None, description="any of")
    valid_at: Phrase | None = Field(default=None, description="default: now")
    pools: list[Robot] = Field(default=[], description="also these pools")


class GroupRecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Name = Field(description="its name")
    query: Text = Field(min_length=1, description="what to find")
    limit: int = Field(default=10, ge=1, le=100, description="hits")


class EntitiesIn(In):
    kind: Literal["person", "name", "code"] | None = Field(default=None, description="only")
    limit: int = Field(default=50, ge=1, le=200, description="a page")
    cursor: Text | None = Field(default=None, description="next page")


class EntityIn(In):
    entity: EntityAsked = Field(description="a name, any case")
    limit: int = Field(default=20, ge=1, le=200, description="a page")
    cursor: Text | None = Field(default=None, description="next page")


class ListIn(In):
    """GET …/memories' filters."""

    scope: Literal["self", "all"] = Field(default="all", description="self: its own")
    type: MemoryType | None = Field(default=None, description="only")
    tags: list[Tag] | None = Field(default=None, description="any of")
    min_importance: float | None = Field(default=None, ge=0, le=10, description="at least")
    min_confidence: float | None = Field(default=None, ge=0, le=1, description="at least")
    sources: list[Source] | None = Field(default=None, description="any of")
    timeframe: Phrase | None = Field(default=None, description="'last week'...")
    include_deleted: bool = Field(default=False, description="forgotten too")
    valid_at: Phrase | None = Field(default=None, description="default: now")
    include: list[Include] | None = Field(default=None, description="superseded too")
    as_of: Instant | None = Field(default=None, description="as believed then")
    pool: Robot | None = Field(default=None, description="only")
    entity: EntityAsked | None = Field(default=None, description="naming it")
    limit: int = Field(default=20, ge=1, le=200, description="a page")
    cursor: Text | None = Field(default=None, description="next page")


class ContextIn(In):
    strategy: Literal["balanced", "recent", "important"] = Field(
        default="balanced", description="what first"
    )
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000, description="budget")


class KeyIn(In):
    aliased: ClassVar[tuple[str, ...]] = ("key",)

    key: MemoryKey = Field(description="a memory's key or #alias")


class UpdateIn(MemoryIn):
    """As PUT …/memories/{key}: every field replaced (absent: its default)."""

    key: MemoryKey = Field(description="created if new")


class ImportanceIn(KeyIn):
    """As PATCH …/memories/{key}: what is given changes, the rest is kept."""

    importance: float | None = Field(default=None, ge=0, le=10, description="new value")
    boost: float | None = Field(default=None, ge=-10, le=10, description="or add this")
    confidence: float | None = Field(default=None, ge=0, le=1, description="null clears")
    source: Source | None = Field(default=None, description="null clears")


Flag = Annotated[StrictBool | None, WithJsonSchema({"type": "boolean"})]


class FeedbackIn(KeyIn):
    """As POST …/memories/{key}/feedback: one of `used` and `pinned: true`, which its request
    model (MemoryFeedback) checks; strict, as the REST body is (no "yes" for true)."""

    used: Flag = Field(default=None, description="of use (true) or not (false)")
    pinned: Flag = Field(default=None, description="true: kept at hand")


class StateIn(In):
    key: Key = Field(description="a state key")
    scope: Literal["robot", "group"] = Field(default="robot", description="group: its group's")


class StateSetIn(StateIn):
    value: Any = Field(description="JSON; null deletes")
    ttl_s: int | None = Field(default=None, ge=1, description="expires after")
    pinned: bool = Field(default=False, description="in every prompt")
    version: int | None = Field(default=None, description="only if still at this version")


class FactsIn(In):
    aliased: ClassVar[tuple[str, ...]] = ("keys",)

    keys: list[MemoryKey] | None = Field(default=None, description="turns by key, in order")
    session: str | None = Field(default=None, description="or a conversation's turns")


class RelatedIn(KeyIn):
    depth: int = Field(default=1, ge=1, le=3, description="links away")
    limit: int = Field(default=10, ge=1, le=50, description="memories")


class LinkIn(KeyIn):
    aliased: ClassVar[tuple[str, ...]] = ("key", "target")

    target: MemoryKey = Field(description="linked to")
    type: LinkType = Field(default="related_to", description="the link")
    weight: float = Field(default=1.0, gt=0, le=1, description="strength")


class ForgetIn(KeyIn):
    hard: bool = Field(default=False, description="for good: needs confirm=key")
    confirm: Text | None = Field(default=None, description="the key again")


class StatsIn(In):
    days: int = Field(default=30, ge=1, le=366, description="of activity")


class TagsIn(In):
    timeframe: Phrase | None = Field(default=None, description="'last week'...")


Session = Annotated[str, Field(pattern=NAME_PATTERN)]


class AppendIn(In):
    session: Session = Field(description="its name")
    messages: list[dict[str, Any]] = Field(min_length=1, description="[{role, content}]")


class WindowIn(In):
    session: Session = Field(description="its name")
    n: int | None = Field(default=None, ge=1, le=10_000, description="last n")
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000, description="budget")


class PromptIn(In):
    input: Text = Field(min_length=1, description="the user's message")
    context_window: int = Field(ge=1, le=10_000_000, description="the model's, in tokens")
    session: Session | None = Field(default=None, description="its history too")
    system: Text | None = Field(default=None, description="system prompt")
    overflow: Overflow = Field(default="drop", description="summarize: what does not fit")


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Name = Field(description="its name")


class GroupCreateIn(GroupIn):
    members: list[Name] = Field(min_length=1, description="robots")
    budget: int | None = Field(default=None, ge=1, le=10_000_000, description="tokens")


class GroupMemberIn(GroupIn):
    robot: Name | None = Field(default=None, description=ROBOT)


class FailoverIn(GroupIn):
    failed: Name = Field(description="leaves")
    to: Name = Field(description="joins")


class ProfileIn(In):
    subject: Name = Field(description="whose")


class ProfileSetIn(ProfileIn):
    slots: dict[str, str | None] = Field(min_length=1, description="slot: value (null removes)")


class SnapshotIn(In):
    name: SnapshotName | None = Field(default=None, description="optional")


class SnapshotIdIn(In):
    id: int = Field(ge=1, le=2**63 - 1, description="snapshot_list's")


# --- outputs: what structuredContent holds -----------------------------------------------


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Remembered(Out):
    key: str
    created: bool
    duplicate_of: str | None = None
    superseded: list[str] = []
    may_supersede: list[str] = []


class Fact(Out):
    key: str
    type: str
    content: str
    created: bool
    derived_from: list[str]


class Facts(Out):
    facts: list[Fact]


class Hit(Out):
    key: str
    score: float
    date: str
    content: str


class Hits(Out):
    hits: list[Hit]


class Entities(Out):
    entities: list[dict[str, Any]]
    next_cursor: str | None = None


class About(Out):
    memories: list[dict[str, Any]]
    next_cursor: str | None = None


class Context(Out):
    text: str
    tokens: int
    items: int


class Forgot(Out):
    key: str
    hard: bool


class Written(Out):
    """A memory as a PUT, PATCH or restore left it."""

    key: str
    version: int
    importance: float
    created: bool | None = None


class Feedback(Out):
    """As the feedback route's 202: the step the learned importance takes at the next flush."""

    key: str
    used: bool | None = None
    pinned: bool
    step: float


class Versions(Out):
    versions: list[dict[str, Any]]


class Chain(Out):
    chain: list[dict[str, Any]]


class RelatedOut(Out):
    related: list[dict[str, Any]]


class Linked(Out):
    weight: float
    created: bool


class Messages(Out):
    messages: list[dict[str, Any]]
    tokens: int


class Group(Out):
    group: str
    members: list[str]
    budget: int


class PoolsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: Robot | None = Field(default=None, description="one, with its memory count")


class PoolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: Robot = Field(description="its name")


class PoolPutIn(PoolIn):
    type: Literal["shared", "team", "task"] = Field(description="kind")
    readers: list[Robot] = Field(default=[], description="may read")
    writers: list[Robot] = Field(default=[], description="may write")
    public_read: bool = Field(default=False, description="every robot reads")
    expires_at: Instant | None = Field(default=None, description="task pools")


class PoolGrantIn(PoolIn):
    robot: Robot = Field(description="granted")
    level: Literal["read", "write", "none"] = Field(description="none: revoke")


class Pool(Out):
    pool: str
    type: str
    readers: list[str]
    writers: list[str]
    public_read: bool
    archived: bool
    memories: int | None = None


class Pools(Out):
    pools: list[Pool]


class Profile(Out):
    subject: str
    slots: dict[str, str]
    tokens: int


class Snapshot(Out):
    id: int
    items: int
    tokens: int


class Snapshots(Out):
    snapshots: list[dict[str, Any]]


class Restored(Out):
    restored: list[str]
    skipped: list[str]
    evicted: list[str]
    tokens: int


class State(Out):
    key: str
    value: Any = None
    version: int | None = None
    deleted: bool = False


class Body(Out):
    """A REST answer as it is (stats, the tag tree)."""

    model_config = ConfigDict(extra="allow")


def when(t: datetime) -> str:
    return t.date().isoformat()


def score(x: float) -> str:
    """0.82 as .82: a token less a hit."""
    text = f"{x:.2f}"
    return text[1:] if text.startswith("0.") else text
