"""State keys' request and response models (PUT/GET/DELETE /v1/robots/{robot}/state/{key})."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.common import StrictModel, integral

# Whose state: the robot's own, or its group's (a blackboard every member reads and writes).
StateScope = Literal["robot", "group"]


class StatePut(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"value": {"step": 2, "todo": ["review"]}, "ttl_s": 3600}]},
    )

    value: Any = Field(
        description="Any JSON value but null (a delete is DELETE), at most HTM_STATE_MAX_BYTES "
        "as compact JSON",
        json_schema_extra={"not": {"type": "null"}},
    )
    ttl_s: Annotated[int, Field(ge=1, le=31_536_000), BeforeValidator(integral)] | None = Field(
        default=None,
        description="Gone this many seconds after the write (at most HTM_STATE_MAX_TTL_S, "
        "itself at most a year); absent: kept until deleted",
    )
    pinned: bool = Field(
        default=False,
        description="Placed in every prompt of the robot (of each member, for a group's key) "
        "as a note `key: value`, never evicted; its tokens count against "
        "HTM_STATE_PINNED_MAX_TOKENS",
    )


class StateRead(BaseModel):
    robot: str
    scope: StateScope
    key: str
    value: Any
    version: int = Field(description="Also the response's ETag; send it as If-Match")
    pinned: bool
    tokens: int = Field(description="Tokens of the note `key: value` a prompt places")
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    updated_by: str = Field(description="The robot that wrote this version")


class StateEntry(BaseModel):
    key: str
    version: int
    pinned: bool
    tokens: int
    expires_at: datetime | None
    updated_at: datetime
    updated_by: str
    value: Any = Field(default=None, description="With values=true only")


class StateList(BaseModel):
    robot: str
    scope: StateScope
    items: list[StateEntry] = Field(description="In key order")
    next: str | None = Field(description="The `after` of the next page; null on the last")
