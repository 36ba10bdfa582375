"""The export file: JSON Lines, a header line, then the namespace's settings (a line per
robot, group and pool, its retention policies and maintenance schedule), one memory per line,
then its explicit links and its snapshots of working memory, each line of those with its
`kind`; a memory's line has none.

Format versions: 1, memories only; 2, snapshots too; 3, the settings and the links. A file is
written with the lowest version that holds what it has, and every older version still
imports (its pools and groups must then exist in the namespace it goes to)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import KEY_PATTERN, NAME_PATTERN
from app.groups.schemas import GroupUpdate
from app.maintenance.schemas import MaintenanceSchedule
from app.pools.schemas import PoolPut
from app.relationships.schemas import LinkCreate
from app.retention.schemas import RetentionPolicies
from app.robots.schemas import RobotUpdate
from app.snapshots.schemas import SnapshotItem

FORMAT_VERSION = 3
SETTINGS_VERSION = 3  # the first version with settings and links
SNAPSHOTS_VERSION = 2


class Header(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: Literal["htm-export"]
    version: int = Field(ge=1)
    namespace: str = Field(pattern=NAME_PATTERN)
    robot: str | None = None
    model: str | None = Field(description="The exporting deployment's embedding model")
    dimension: int | None = Field(description="The exporting database's vector dimension")
    embeddings: bool = False
    exported_at: datetime


class FeedbackRecord(BaseModel):
    """What feedback on a memory's use taught it (app/memories/learning.py): its steps as one
    map of the importance, scale·importance + shift, and how many there were."""

    model_config = ConfigDict(extra="forbid")

    scale: float = Field(ge=0, le=1)
    shift: float = Field(ge=0, le=10)
    used: int = Field(ge=0, le=2**31 - 1)
    unused: int = Field(ge=0, le=2**31 - 1)
    pinned: int = Field(default=0, ge=0, le=2**31 - 1)
    forgotten_nearby: int = Field(default=0, ge=0, le=2**31 - 1)


class Record(BaseModel):
    """One memory. Shapes only: the deployment's limits are the service's to check."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(pattern=KEY_PATTERN)
    content: str
    type: str = "fact"
    importance: float = 1.0
    confidence: float | None = None
    source: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    author: str = Field(pattern=NAME_PATTERN)
    created_at: datetime
    updated_at: datetime | None = None
    version: int | None = None
    deleted_at: datetime | None = None
    embedding_status: str | None = None
    embedding_model: str | None = None
    embedding: list[float] | None = None
    valid_from: datetime | None = Field(default=None, description="null: from created_at")
    valid_to: datetime | None = None
    superseded_by: str | None = Field(
        default=None,
        description="The memory that superseded it: an import adds that one superseding it",
        pattern=KEY_PATTERN,
    )
    archived: str | None = Field(
        default=None, description="The retention rule that archived it (a soft delete)"
    )
    visibility: Literal["namespace", "private", "group", "pool"] = Field(
        default="namespace",
        description="Who may read it; an import of a group memory needs its group, of a pool "
        "memory the pool, in the file or in the namespace",
    )
    readers: list[str] = Field(default_factory=list, description="A private memory's grants")
    pool: str | None = None
    group: str | None = Field(
        default=None,
        description="A group memory's group; null when that group was deleted since (then "
        "only its author reads it)",
    )
    access_count: int = Field(default=0, ge=0, le=2**31 - 1)
    last_accessed_at: datetime | None = Field(
        default=None, description="With access_count, what retention's idle and stale judge"
    )
    feedback: FeedbackRecord | None = Field(
        default=None, description="Its learned importance's steps; null: no feedback"
    )


def _fields(record: BaseModel, *own: str) -> dict[str, Any]:
    """The request body a settings line holds: the fields it sets, checked by the request
    model as the API checks them (its defaults for the others)."""
    return record.model_dump(exclude=set(own), exclude_unset=True)


class RobotRecord(BaseModel):
    """A robot's settings (PUT /v1/robots/{robot}); its group is its group's line."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["robot"]
    name: str = Field(pattern=NAME_PATTERN)
    working_memory_budget: Any = None
    session_ttl_s: Any = None
    summarize_evictions: Any = None

    def body(self) -> RobotUpdate:
        return RobotUpdate.model_validate(_fields(self, "kind", "name"))


class GroupRecord(BaseModel):
    """A group and its members (PUT /v1/groups/{group})."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["group"]
    name: str = Field(pattern=NAME_PATTERN)
    members: Any = None
    working_memory_budget: Any = None

    def body(self) -> GroupUpdate:
        return GroupUpdate.model_validate(_fields(self, "kind", "name"))


class PoolRecord(BaseModel):
    """A pool, its grants (`readers`, `writers`, `public_read`) and expiry (PUT
    /v1/pools/{pool}), and whether it is archived (DELETE /v1/pools/{pool})."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["pool"]
    name: str = Field(pattern=NAME_PATTERN)
    type: Any = None
    readers: Any = None
    writers: Any = None
    public_read: Any = None
    expires_at: Any = None
    archived_at: datetime | None = Field(
        default=None, description="Archived then; an import archives it (at its own time)"
    )

    def body(self) -> PoolPut:
        return PoolPut.model_validate(_fields(self, "kind", "name", "archived_at"))


class RetentionRecord(BaseModel):
    """The namespace's retention policies (PUT /v1/retention)."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["retention"]
    policies: Any = None

    def body(self) -> RetentionPolicies:
        return RetentionPolicies.model_validate(_fields(self, "kind"))


class MaintenanceRecord(BaseModel):
    """The namespace's maintenance schedule (PUT /v1/maintenance)."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["maintenance"]
    schedule: Any = None
    steps: Any = None
    dedupe: Any = None

    def body(self) -> MaintenanceSchedule:
        return MaintenanceSchedule.model_validate(_fields(self, "kind"))


class LinkRecord(BaseModel):
    """An explicit link (POST /v1/robots/{robot}/memories/{key}/links); the derived ones
    (shared tags, supersede, derived-from) are made again as the memories are written."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["link"]
    source: str = Field(pattern=KEY_PATTERN)
    target: Any = None
    type: Any = None
    weight: Any = None

    def body(self) -> LinkCreate:
        return LinkCreate.model_validate(_fields(self, "kind", "source"))


class SnapshotRecord(BaseModel):
    """One snapshot of a robot's working memory: its items name memories by key (an import
    maps them to the memories of those keys), as do the memories readable when it was taken."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["snapshot"]
    robot: str = Field(pattern=NAME_PATTERN)
    name: str | None = None
    created_at: datetime
    items: list[SnapshotItem]
    readable: list[str] = Field(default_factory=list)


Setting = RobotRecord | GroupRecord | PoolRecord | RetentionRecord | MaintenanceRecord
Line = Record | Setting | LinkRecord | SnapshotRecord
KINDS: dict[str, type[BaseModel]] = {
    "robot": RobotRecord,
    "group": GroupRecord,
    "pool": PoolRecord,
    "retention": RetentionRecord,
    "maintenance": MaintenanceRecord,
    "link": LinkRecord,
    "snapshot": SnapshotRecord,
}
