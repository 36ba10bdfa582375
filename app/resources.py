"""Everything the service holds for its lifetime, created in the lifespan and closed after it.

Nothing here connects at import time. The engine and Redis client connect lazily, so the
service starts (and /readyz reports 503) while a dependency is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine

from app.auth.service import KeyCache
from app.config import Settings
from app.db.engine import create_engine
from app.db.session import DbSession, Sessionmaker, create_sessionmaker
from app.recall.repository import LargeNamespaces, LexemeStats
from app.robots.cache import RobotCache
from app.tokens import Tokenizer
from app.working_memory.protocol import RepairQueue, Scope, WriteProtocol
from app.working_memory.store import WorkingMemoryStore

log = logging.getLogger(__name__)


def create_redis(settings: Settings) -> Any:
    if not settings.redis_url:
        raise RuntimeError("HTM_REDIS_URL is not set; `htm serve` starts an embedded Redis")
    # Short timeouts: when Redis is down, requests degrade quickly instead of hanging.
    opts: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": settings.redis_timeout_s,
        "socket_timeout": settings.redis_timeout_s,
    }
    if settings.redis_cluster:
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(settings.redis_url, **opts)
    return aioredis.from_url(settings.redis_url, **opts)


@dataclass
class RedisBreaker:
    """After a Redis failure, skip Redis for a short while instead of paying a connect
    timeout on every request; the first request after the pause tries again."""

    pause_s: float
    down_until: float = 0.0

    @property
    def open(self) -> bool:
        return time.monotonic() < self.down_until

    def trip(self) -> None:
        self.down_until = time.monotonic() + self.pause_s

    def reset(self) -> None:
        self.down_until = 0.0


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Resources:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: Sessionmaker
    redis: Any
    working_memory: WorkingMemoryStore
    redis_breaker: RedisBreaker
    tokenizer: Tokenizer
    embedder: Any = None
    embedding_error: str | None = None
    namespace_ids: dict[str, int] = field(default_factory=dict)
    key_cache: KeyCache = field(default_factory=KeyCache)
    robot_cache: RobotCache = field(default_factory=RobotCache)
    large_namespaces: LargeNamespaces = field(default_factory=LargeNamespaces)
    lexeme_stats: LexemeStats = field(default_factory=LexemeStats)
    # Robots whose working memory must be rebuilt where Postgres could not record it.
    wm_repairs: RepairQueue = field(default_factory=RepairQueue)
    # The service's clock; tests replace it to freeze time where order depends on it.
    clock: Callable[[], datetime] = utc_now

    def write_protocol(
        self, session: DbSession, namespace_id: int, namespace: str
    ) -> WriteProtocol:
        """The two-tier write protocol for one request's session in one namespace."""
        return WriteProtocol(
            session,
            self.working_memory,
            self.redis_breaker,
            self.robot_cache,
            self.wm_repairs,
            Scope(namespace_id, namespace),
            default_budget=self.settings.working_memory_budget,
            clock=self.clock,
        )

    def embedding_description(self) -> dict[str, Any]:
        if self.embedder is None:
            return {"provider": self.settings.embedding_provider, "loaded": False}
        return {
            "provider": self.embedder.provider,
            "model": self.embedder.model,
            "dimension": self.embedder.dimension,
            "loaded": True,
        }


async def _build_embedder(settings: Settings) -> tuple[Any, str | None]:
    if settings.embedding_provider == "none":
        return None, None
    from app.embeddings.factory import build_embedder

    try:
        return await build_embedder(settings), None
    except Exception as exc:
        # The service still starts: memories are stored as 'pending' and /readyz says why.
        msg = f"embedding provider {settings.embedding_provider!r} failed to load: {exc}"
        log.error(msg)
        return None, msg


@asynccontextmanager
async def open_resources(settings: Settings) -> AsyncIterator[Resources]:
    engine = create_engine(settings)
    redis = create_redis(settings)
    tokenizer = Tokenizer.load(settings.tiktoken_encoding)
    embedder, embedding_error = await _build_embedder(settings)
    res = Resources(
        settings=settings,
        engine=engine,
        sessionmaker=create_sessionmaker(engine),
        redis=redis,
        working_memory=WorkingMemoryStore(redis),
        redis_breaker=RedisBreaker(settings.redis_retry_after_s),
        tokenizer=tokenizer,
        embedder=embedder,
        embedding_error=embedding_error,
    )
    try:
        yield res
    finally:
        if embedder is not None:
            await embedder.aclose()
        await redis.aclose()
        await engine.dispose()
