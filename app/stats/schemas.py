from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, Field


class WorkingMemoryUsage(BaseModel):
    group: str | None = Field(
        default=None,
        description="The group whose working memory the robot shares (its budget and usage)",
    )
    tokens: int
    max_tokens: int
    utilization: float = Field(description="Percent of the budget in use")
    items: int
    degraded: bool = Field(description="True when read from Postgres because Redis is down")


class LongTermStats(BaseModel):
    memories: int = Field(description="Memories this robot authored (not deleted)")
    by_type: dict[str, int]
    oldest: datetime | None
    newest: datetime | None
    pending_embeddings: int
    failed_embeddings: int = Field(
        description="Memories the provider could not embed (out of vector search until changed)"
    )


class DayActivity(BaseModel):
    day: date
    adds: int
    recalls: int
    evictions: int


class RobotStats(BaseModel):
    robot: str
    working_memory: WorkingMemoryUsage
    long_term: LongTermStats
    activity: list[DayActivity] = Field(description="Per UTC day, oldest first")


class RobotUsage(BaseModel):
    robot: str
    working_memory: WorkingMemoryUsage


class Versions(BaseModel):
    postgres: str | None
    pgvector: str | None
    timescaledb: str | None
    redis: str | None


class CacheStats(BaseModel):
    entries: int
    max_entries: int
    hits: int
    misses: int
    hit_ratio: float | None = Field(description="hits / (hits + misses); null before a lookup")


class NamespaceStats(BaseModel):
    namespace: str
    memories: int
    deleted_memories: int
    pending_embeddings: int
    failed_embeddings: int = Field(
        description="Memories the provider could not embed (out of vector search until changed)"
    )
    robots: list[RobotUsage]
    memory_bytes: int = Field(
        description="Bytes this namespace's memories take as stored: content, metadata, tags"
        " and embedding of every memory, soft-deleted ones included (they are kept until a"
        " hard delete); indexes and row overhead are not counted"
    )
    hypertables: list[str] = Field(description="Empty when TimescaleDB is not in use")
    versions: Versions
    query_embedding_cache: CacheStats = Field(
        description="This process's cache of recall query embeddings (all namespaces)"
    )
