from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common import NAME_PATTERN, StrictModel, Text, unset

Role = Literal["admin", "writer", "reader"]


class ApiKeyCreate(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "research-agent", "role": "writer"}]},
    )

    name: Text = Field(min_length=1, max_length=100, description="What the key is for")
    role: Role = Field(
        description="admin: everything incl. keys; writer: add/recall/forget; reader: reads only"
    )
    robot: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="Bind the key to this robot: it then acts only as that robot (any other "
        "robot in a path, a query or an MCP call is a 403) and cannot change groups, so a "
        "robot's private memories stay private from other robots' keys. Not for admin keys",
    )

    schema_rules = ({"if": {"properties": {"role": {"const": "admin"}}}, "then": unset("robot")},)

    @model_validator(mode="after")
    def _not_admin(self) -> ApiKeyCreate:
        if self.robot is not None and self.role == "admin":
            raise ValueError("an admin key acts for the whole namespace: it cannot be bound")
        return self


class ApiKeyRead(BaseModel):
    id: int
    name: str
    role: Role
    robot: str | None = Field(default=None, description="The robot it is bound to, if any")
    prefix: str = Field(description="The key's first characters, to tell keys apart")
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class ApiKeyCreated(ApiKeyRead):
    namespace: str
    key: str = Field(description="The secret. Shown only in this response; store it now")
