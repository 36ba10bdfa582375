from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import MAX_JSON_DEPTH, JsonObject, StrictModel, Text

Role = Literal["system", "user", "assistant", "tool"]

_EXAMPLE: dict[str, Any] = {
    "messages": [
        {"role": "user", "content": "My flight to Lisbon leaves Friday at 7:40."},
        {
            "role": "assistant",
            "content": "Noted: Lisbon, Friday 7:40.",
            "metadata": {"model": "gpt-4o"},
            "remember": True,
        },
    ]
}


class MessageCreate(StrictModel):
    role: Role = Field(description="system, user, assistant or tool")
    content: Text = Field(min_length=1, description="The message's text (size-limited)")
    metadata: JsonObject = Field(
        default_factory=dict,
        description=f"Any JSON object (nested at most {MAX_JSON_DEPTH} deep; the deployment's "
        "metadata limits apply to it as promoted, with `session` and `role` added)",
    )
    remember: bool = Field(
        default=False, description="Promote into long-term memory when the session ends"
    )


class MessagesAppend(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE]})

    messages: list[MessageCreate] = Field(min_length=1, description="Appended in this order")


class MessageRead(BaseModel):
    seq: int = Field(description="1, 2, ... within the session, in append order")
    role: Role
    content: str
    metadata: dict[str, Any]
    remember: bool
    tokens: int = Field(description="tiktoken count of the content")
    access_count: int = Field(description="Window reads that returned this message")
    created_at: datetime


class MessagesAppended(BaseModel):
    robot: str
    session: str
    messages: list[MessageRead]
    expires_at: datetime
    degraded: bool = Field(
        description="True when Redis could not take the messages: they are stored (PostgreSQL) "
        "and windows are read from there"
    )


class SessionWindow(BaseModel):
    robot: str
    session: str
    messages: list[MessageRead] = Field(description="Oldest first")
    tokens: int = Field(description="Sum of the messages' token counts")
    total_messages: int = Field(description="Messages in the session")
    expires_at: datetime
    degraded: bool = Field(description="True when read from PostgreSQL because Redis is down")


class SessionEnded(BaseModel):
    robot: str
    session: str
    promoted: list[str] = Field(
        description="Keys of the memories the session's messages became (remembered, or read "
        "at least HTM_SESSION_PROMOTE_ACCESSES times), in message order"
    )
    discarded: int = Field(description="Messages deleted without promotion")
