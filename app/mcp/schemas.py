"""The tools' inputs and outputs: compact on purpose, since every definition costs the model
context before the first call (tests/mcp/test_mcp_budget.py holds the totals). An input names
the fields an agent uses; each tool builds the REST request model from it, so the same rules
check it (and the REST API keeps every option). `robot` is optional everywhere: the
connection's default robot (the `X-Robot` header, or `htm mcp --robot`) when left out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import (
    KEY_PATTERN,
    NAME_PATTERN,
    Instant,
    JsonObject,
    MemoryType,
    Phrase,
    Tag,
    Text,
)
from app.entities.schemas import EntityAsked
from app.prompt.schemas import Overflow
from app.relationships.schemas import LinkType
from app.snapshots.schemas import SnapshotName

Robot = Annotated[str, Field(pattern=NAME_PATTERN)]
Key = Annotated[str, Field(pattern=KEY_PATTERN)]


class In(BaseModel):
    model_config = ConfigDict(extra="forbid")

    robot: Robot | None = None


class RememberIn(In):
    content: Text = Field(min_length=1)
    key: Key | None = Field(default=None, description="default: made up")
    type: MemoryType = "fact"
    importance: float = Field(default=1.0, ge=0, le=10)
    confidence: float | None = Field(default=None, ge=0, le=1)
    source: str | None = Field(default=None, description="user, tool:web, ...")
    tags: list[Tag] = []
    metadata: JsonObject = {}
    supersedes: list[Key] = Field(default=[], description="keys this replaces")
    valid_from: Instant | None = None
    visibility: Literal["namespace", "private", "group"] | None = Field(
        default=None, description="default namespace: every robot"
    )
    readers: list[Robot] | None = Field(default=None, description="private: also these")
    pool: Robot | None = Field(default=None, description="add into this pool")


class RecallIn(In):
    query: Text = Field(min_length=1)
    limit: int = Field(default=10, ge=1, le=100)
    strategy: Literal["hybrid", "vector", "fulltext"] = "hybrid"
    timeframe: Phrase | None = Field(default=None, description="'last week', ...")
    tags: list[Tag] | None = Field(default=None, description="any of")
    min_confidence: float | None = Field(default=None, ge=0, le=1)
    sources: list[str] | None = Field(default=None, description="any of")
    valid_at: Phrase | None = Field(default=None, description="default: now")
    pools: list[Robot] = Field(default=[], description="also these pools")


class GroupRecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Annotated[str, Field(pattern=NAME_PATTERN)]
    query: Text = Field(min_length=1)
    limit: int = Field(default=10, ge=1, le=100)


class EntitiesIn(In):
    kind: Literal["person", "name", "code"] | None = None
    limit: int = Field(default=50, ge=1, le=200)
    cursor: Text | None = None


class EntityIn(In):
    entity: EntityAsked
    limit: int = Field(default=20, ge=1, le=200)
    cursor: Text | None = None


class ContextIn(In):
    strategy: Literal["balanced", "recent", "important"] = "balanced"
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)


class KeyIn(In):
    key: Key


class StateIn(KeyIn):
    scope: Literal["robot", "group"] = Field(default="robot", description="group: its group's")


class StateSetIn(StateIn):
    value: Any = Field(description="JSON; null deletes")
    ttl_s: int | None = Field(default=None, ge=1)
    pinned: bool = Field(default=False, description="in every prompt")
    version: int | None = Field(default=None, description="only if still at this version")


class FactsIn(In):
    keys: list[Key] | None = Field(default=None, description="turns by key, in order")
    session: str | None = Field(default=None, description="or a conversation's turns")


class RelatedIn(KeyIn):
    depth: int = Field(default=1, ge=1, le=3)
    limit: int = Field(default=10, ge=1, le=50)


class LinkIn(KeyIn):
    target: Key
    type: LinkType = "related_to"
    weight: float = Field(default=1.0, gt=0, le=1)


class ForgetIn(KeyIn):
    hard: bool = Field(default=False, description="needs confirm=key")
    confirm: Text | None = None


class StatsIn(In):
    days: int = Field(default=30, ge=1, le=366)


class TagsIn(In):
    timeframe: Phrase | None = None


class AppendIn(In):
    session: Annotated[str, Field(pattern=NAME_PATTERN)]
    messages: list[dict[str, Any]] = Field(min_length=1, description="[{role, content}]")


class WindowIn(In):
    session: Annotated[str, Field(pattern=NAME_PATTERN)]
    n: int | None = Field(default=None, ge=1, le=10_000)
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)


class PromptIn(In):
    input: Text = Field(min_length=1)
    context_window: int = Field(ge=1, le=10_000_000)
    session: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None
    system: Text | None = None
    overflow: Overflow = "drop"


Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Name


class GroupCreateIn(GroupIn):
    members: list[Name] = Field(min_length=1)
    budget: int | None = Field(default=None, ge=1, le=10_000_000, description="tokens")


class GroupMemberIn(GroupIn):
    robot: Name | None = None


class FailoverIn(GroupIn):
    failed: Name
    to: Name


class ProfileIn(In):
    subject: Name


class ProfileSetIn(ProfileIn):
    slots: dict[str, str | None] = Field(min_length=1, description="slot: value (null removes)")


class SnapshotIn(In):
    name: SnapshotName | None = None


class SnapshotIdIn(In):
    id: int = Field(ge=1, le=2**63 - 1)


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

    pool: Robot


class PoolPutIn(PoolIn):
    type: Literal["shared", "team", "task"]
    readers: list[Robot] = []
    writers: list[Robot] = []
    public_read: bool = False
    expires_at: Instant | None = Field(default=None, description="task pools")


class PoolGrantIn(PoolIn):
    robot: Robot
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
