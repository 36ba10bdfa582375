from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.common import NO_NUL, StrictModel

SnapshotName = Annotated[str, StringConstraints(min_length=1, max_length=200), NO_NUL]


class SnapshotCreate(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"name": "before"}]})

    name: SnapshotName | None = Field(default=None, description="A label of your choosing")


class SnapshotRead(BaseModel):
    id: int
    robot: str
    name: str | None
    created_at: datetime
    item_count: int = Field(
        description="Items of working memory when it was taken (but those its robot may no "
        "longer read)"
    )
    tokens: int = Field(description="Their token total")


class SnapshotItem(BaseModel):
    key: str
    version: int = Field(description="The memory's version it held")
    tokens: int
    importance: float
    added_at: datetime
    last_access_at: datetime
    from_recall: bool


class SnapshotDetail(SnapshotRead):
    items: list[SnapshotItem] = Field(
        description="In eviction order (next victim first); a memory the robot may no longer "
        "read is left out"
    )
    readable: int = Field(
        description="How many memories the robot could read when it was taken (and still may)"
    )


class Skipped(BaseModel):
    key: str
    reason: Literal["forgotten", "superseded"] = Field(
        description="forgotten: deleted since (soft or hard); superseded: its validity ended"
    )


class SnapshotRestored(BaseModel):
    id: int
    robot: str
    restored: list[str] = Field(description="Keys placed, in the snapshot's order")
    skipped: list[Skipped] = Field(
        description="Memories no longer current: not placed (one the robot may no longer read "
        "is not placed nor named: it is counted in `withheld`)"
    )
    withheld: int = Field(
        description="How many memories of the snapshot the robot may no longer read (a grant "
        "taken away, a visibility changed): not placed, and not named, as nothing a robot may "
        "not read is"
    )
    evicted: list[str] = Field(description="Keys the budget left out (the eviction policy)")
    tokens: int = Field(description="Working memory's token total after the restore")
