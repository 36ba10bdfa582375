from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import StrictModel, Text

Role = Literal["admin", "writer", "reader"]


class ApiKeyCreate(StrictModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "research-agent", "role": "writer"}]},
    )

    name: Text = Field(min_length=1, max_length=100, description="What the key is for")
    role: Role = Field(
        description="admin: everything incl. keys; writer: add/recall/forget; reader: reads only"
    )


class ApiKeyRead(BaseModel):
    id: int
    name: str
    role: Role
    prefix: str = Field(description="The key's first characters, to tell keys apart")
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class ApiKeyCreated(ApiKeyRead):
    namespace: str
    key: str = Field(description="The secret. Shown only in this response; store it now")
