from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.common import (
    INSTANT_RANGE,
    Instant,
    Integer,
    JsonObject,
    MemoryType,
    StrictModel,
    Tag,
    Text,
    Vector,
)

Strategy = Literal["vector", "fulltext", "hybrid"]
EmbeddingState = Literal["ready", "unavailable", "not_needed"]


class RecallFilters(StrictModel):
    types: list[MemoryType] | None = Field(default=None, description="Any of these types")
    tags_any: list[Tag] | None = Field(default=None, description="At least one of these tags")
    tags_all: list[Tag] | None = Field(default=None, description="All of these tags")
    min_importance: float | None = Field(default=None, ge=0, le=10)
    metadata: JsonObject | None = Field(
        default=None, description="JSON containment: the memory's metadata includes this object"
    )


class RecallRequest(StrictModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "What did we decide about the staging database?",
                    "strategy": "hybrid",
                    "limit": 10,
                    "timeframe": "last month",
                    "scope": "all",
                    "filters": {"tags_any": ["infra"]},
                }
            ]
        },
    )

    query: Text = Field(min_length=1, description="A question or keywords, as the agent asks")
    strategy: Strategy = "hybrid"
    limit: Integer = Field(default=20, ge=1, description="At most max_recall_limit (default 100)")
    timeframe: Text | None = Field(
        default=None,
        max_length=200,
        description="ISO-8601 or a phrase: 'last week', 'since 2025-01-01', 'yesterday', ...",
    )
    scope: Literal["self", "all"] = Field(
        default="all", description="self: memories this robot authored; all: the namespace's"
    )
    filters: RecallFilters = Field(default_factory=RecallFilters)
    embedding: Vector | None = Field(
        default=None,
        description="Client-supplied query vector (skips the embedder): float32 elements, "
        "not all zero",
    )
    now: Instant | None = Field(
        default=None,
        description="Evaluate the timeframe as of this instant (default: now). "
        f"From {INSTANT_RANGE}",
    )
    load_into_working_memory: bool = Field(
        default=True, description="Place the hits in the robot's working memory"
    )


class RecallHit(BaseModel):
    key: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    author: str
    token_count: int
    created_at: datetime
    score: float = Field(description="The strategy's score; the order of hits")
    vector_rank: int | None
    vector_similarity: float | None = Field(description="1 − cosine distance")
    fulltext_rank: int | None
    fulltext_score: float | None


class TimeframeRead(BaseModel):
    start: datetime | None
    end: datetime | None


class RecallWorkingMemory(BaseModel):
    loaded: list[str] = Field(description="Keys now in the robot's working memory")
    evicted: list[str] = Field(description="Keys evicted to make room")
    not_admitted: list[str] = Field(description="Keys too large for the budget or not placed")
    reason: Literal["loaded", "unavailable", "skipped"] = "loaded"


class RecallResult(BaseModel):
    strategy: Strategy
    query: str
    timeframe: TimeframeRead | None
    embedding: EmbeddingState = Field(
        description="unavailable: the embedder failed, so hybrid ran on full text only"
    )
    hits: list[RecallHit]
    working_memory: RecallWorkingMemory
