"""The read-replica tests' servers: a real streaming replica of a primary of their own
(bench/replica_pair.py), shared by the module; tests isolate by namespace."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bench.replica_pair import Pair, make_pair


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    # Not under pytest's tmp_path: its root is made 0700 again by every pytest session that
    # starts, and the servers' user must reach the directories.
    base = Path(tempfile.mkdtemp(prefix="htm-replicas-"))
    try:
        made = make_pair(base)
        yield made
        made.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def replica_app(redis_url: str, pair: Pair, ns: str):  # type: ignore[no-untyped-def]
    """`async with replica_app(**settings) as client`: the app on the pair's primary with its
    replica in HTM_DATABASE_REPLICA_URLS, scoped to a fresh namespace; the replica is caught
    up and its lag measured before the client is handed out. `client.replicas` is the app's
    `Replicas` (what served each read)."""
    import contextlib

    import httpx

    from app.main import create_app
    from tests.conftest import make_settings

    @contextlib.asynccontextmanager
    async def make(**overrides: object) -> AsyncIterator[httpx.AsyncClient]:
        values: dict[str, object] = {
            "database_replica_urls": [pair.replica.url],
            "replica_max_lag_s": 60.0,
            "replica_wait_s": 0.5,
            **overrides,
        }
        app = create_app(make_settings(pair.primary.url, redis_url, **values), background=False)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://htm") as client:
                client.headers["X-Namespace"] = ns
                replicas = app.state.components.replicas
                client.replicas = replicas  # type: ignore[attr-defined]
                await pair.caught_up()
                if replicas is not None:
                    await replicas.check()
                yield client

    return make
