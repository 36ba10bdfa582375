from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.working_memory.store import Strategy


class WorkingMemoryOutcome(BaseModel):
    admitted: bool = Field(description="Whether the memory is now in the robot's working memory")
    reason: Literal[
        "admitted",
        "too_large",
        "evicted",
        "superseded",
        "unavailable",
        "not_placed",
        "not_shared",
        "not_readable",
    ] = Field(
        default="admitted",
        description="too_large: over the robot's whole budget; evicted: pushed out by a later "
        "memory of the same batch; superseded: replaced or forgotten by another request before "
        "it could be placed; unavailable: working memory could not be updated now (Redis is "
        "down, say): the memory is stored, and working memory is repaired when it answers; "
        "not_placed: stored without placing (a batch sent with `working_memory: false`, or "
        "an eviction summary that did not fit); not_shared: a private or pool memory is not put "
        "in a group's shared working memory, which every member reads; not_readable: the robot "
        "may no longer read it (a pool grant taken away since it was read)",
    )
    evicted: list[str] = Field(default_factory=list, description="Keys evicted to make room")


class WorkingMemoryEntry(BaseModel):
    key: str
    content: str
    tokens: int
    importance: float
    added_at: datetime
    last_access_at: datetime
    from_recall: bool


class WorkingMemoryRead(BaseModel):
    robot: str
    group: str | None = Field(
        default=None, description="The robot's group: this working memory is the group's, shared"
    )
    tokens: int
    max_tokens: int = Field(description="The robot's budget (its group's, in a group)")
    utilization: float = Field(description="tokens / max_tokens × 100")
    items: list[WorkingMemoryEntry] = Field(description="In eviction order: next victim first")
    degraded: bool = Field(description="True when served from Postgres because Redis is down")


class WorkingMemoryCleared(BaseModel):
    robot: str
    removed: int


class ContextItemRead(BaseModel):
    key: str
    tokens: int
    importance: float
    score: float = Field(description="The strategy's ranking value")


class ContextRead(BaseModel):
    robot: str
    strategy: Strategy
    text: str = Field(description="Items' contents joined by a blank line")
    items: list[ContextItemRead]
    tokens: int = Field(description="Sum of the included items' tokens; never above max_tokens")
    max_tokens: int
    degraded: bool = Field(description="True when served from Postgres because Redis is down")
