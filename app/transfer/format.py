"""The export file: JSON Lines, a header line, then one memory per line, then one line per
snapshot of working memory (`"kind": "snapshot"`, format version 2: a file with none is
written as version 1, which an older htm reads)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import KEY_PATTERN, NAME_PATTERN
from app.snapshots.schemas import SnapshotItem

FORMAT_VERSION = 2


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


class Record(BaseModel):
    """One memory. Shapes only: the deployment's limits are the service's to check."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(pattern=KEY_PATTERN)
    content: str
    type: str = "fact"
    importance: float = 1.0
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
        default=None, description="Exported for reading; an import keeps the validity only"
    )
    archived: str | None = Field(
        default=None, description="The retention rule that archived it (a soft delete)"
    )
    visibility: Literal["namespace", "private", "group", "pool"] = Field(
        default="namespace",
        description="Who may read it; an import of a group memory needs its author in a "
        "group, of a pool memory the pool, with the author among its writers",
    )
    readers: list[str] = Field(default_factory=list, description="A private memory's grants")
    pool: str | None = None
    group: str | None = Field(default=None, description="Exported for reading")


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
