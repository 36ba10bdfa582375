from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common import Instant, StrictModel, given, unset
from app.visibility import MAX_READERS, Name

PoolType = Literal["shared", "team", "task"]
Level = Literal["read", "write"]


class PoolPut(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"type": "team", "readers": ["reviewer"], "writers": ["alice", "bob"]},
            ]
        },
    )

    type: PoolType = Field(
        description="shared (long-lived), team (a team's working set) or task (expires at "
        "`expires_at`: its memories are then read by nobody, and the pool is archived)"
    )
    readers: list[Name] = Field(
        default_factory=list, max_length=MAX_READERS, description="Robots that may read it"
    )
    writers: list[Name] = Field(
        default_factory=list,
        max_length=MAX_READERS,
        description="Robots that may add into it (and read it)",
    )
    public_read: bool = Field(default=False, description="Every robot of the namespace reads it")
    expires_at: Instant | None = Field(default=None, description="For a task pool: required")

    schema_rules = (
        {
            "if": {"properties": {"type": {"const": "task"}}},
            "then": given("expires_at", {"type": "string"}),
            "else": unset("expires_at"),
        },
    )

    @model_validator(mode="after")
    def _expiry(self) -> PoolPut:
        if (self.type == "task") != (self.expires_at is not None):
            raise ValueError("a task pool needs `expires_at`; only a task pool has one")
        return self


class PoolGrant(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"level": "read"}]})

    level: Level = Field(description="read, or write (which reads too)")


class PoolStats(BaseModel):
    memories: int = Field(description="Current memories in the pool")
    tokens: int
    by_author: dict[str, int] = Field(description="Memories per robot that added them")


class PoolRead(BaseModel):
    name: str
    type: PoolType
    readers: list[str]
    writers: list[str]
    public_read: bool
    expires_at: datetime | None
    archived_at: datetime | None = Field(
        description="Set when it was deleted or expired: its memories are kept, read by nobody"
    )
    created_at: datetime
    updated_at: datetime
    stats: PoolStats | None = Field(default=None, description="On GET of one pool")
