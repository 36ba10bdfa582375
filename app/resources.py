"""Everything the service holds for its lifetime, created in the lifespan and closed after it.

Nothing here connects at import time. The engine and Redis client connect lazily, so the
service starts (and /readyz reports 503) while a dependency is down.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import create_engine, create_sessionmaker
from app.tokens import Tokenizer

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
class Resources:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    redis: Any
    tokenizer: Tokenizer
    embedder: Any = None
    embedding_error: str | None = None
    background: list[Any] = field(default_factory=list)

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
