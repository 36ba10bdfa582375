"""The tools' inputs: the REST API's request models plus the path's parameters, so a field
added to a request model is a tool argument too, with the same rules."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from app.common import KEY_PATTERN, NAME_PATTERN, StrictModel, Text
from app.memories.schemas import MemoryCreate
from app.prompt.schemas import PromptRequest
from app.recall.schemas import RecallRequest
from app.sessions.schemas import MessagesAppend
from app.working_memory.store import Strategy

Robot = Annotated[str, Field(pattern=NAME_PATTERN, description="Robot name, chosen by the client")]
Key = Annotated[str, Field(pattern=KEY_PATTERN, description="Memory key, unique in the namespace")]


class RememberInput(MemoryCreate):
    """POST /v1/robots/{robot}/memories."""

    robot: Robot


class RecallInput(RecallRequest):
    """POST /v1/robots/{robot}/recall."""

    robot: Robot


class ContextInput(StrictModel):
    """GET /v1/robots/{robot}/context."""

    robot: Robot
    strategy: Strategy = Field(
        default="balanced",
        description="recent: last access first; important: importance first; "
        "balanced: importance × 1/(1 + hours since added)",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, le=10_000_000, description="Default: the robot's budget"
    )


class ForgetInput(StrictModel):
    """DELETE /v1/robots/{robot}/memories/{key}."""

    robot: Robot
    key: Key
    hard: bool = Field(default=False, description="Delete permanently (needs `confirm`)")
    confirm: Text | None = Field(
        default=None, description="For a hard delete: the memory's key, repeated"
    )


class StatsInput(StrictModel):
    """GET /v1/robots/{robot}/stats, or GET /v1/stats without a robot."""

    robot: Robot | None = Field(default=None, description="A robot's stats; none: the namespace's")
    days: int = Field(default=30, ge=1, le=366, description="Days of activity (a robot's stats)")


class TagsInput(StrictModel):
    """GET /v1/tags."""

    robot: Robot | None = Field(default=None, description="Only memories this robot authored")
    timeframe: Text | None = Field(
        default=None, max_length=200, description="ISO-8601 or a phrase: 'last week', ..."
    )


class HistoryInput(StrictModel):
    """GET /v1/robots/{robot}/memories/{key}/history."""

    robot: Robot
    key: Key
    limit: int = Field(default=20, ge=1, le=100, description="Links each way, at most")


class VersionsInput(StrictModel):
    """GET /v1/robots/{robot}/memories/{key}/versions."""

    robot: Robot
    key: Key
    limit: int = Field(default=50, ge=1, le=200)


Session = Annotated[str, Field(pattern=NAME_PATTERN, description="Session id, chosen by you")]


class SessionAppendInput(MessagesAppend):
    """POST /v1/robots/{robot}/sessions/{session}/messages."""

    robot: Robot
    session: Session


class SessionWindowInput(StrictModel):
    """GET /v1/robots/{robot}/sessions/{session}/messages."""

    robot: Robot
    session: Session
    n: int | None = Field(default=None, ge=1, le=1000, description="The last n (default 50)")
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)


class PromptInput(PromptRequest):
    """POST /v1/robots/{robot}/prompt."""

    robot: Robot
