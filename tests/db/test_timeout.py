"""Statement timeouts: a statement the server cancels (statement_timeout, SQLSTATE 57014) is a
503 problem+json, its transaction rolls back and its connection goes back to the pool; a
client-side command timeout drops that one connection, never the pool."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.config import Settings
from app.db.engine import create_engine
from app.db.session import DbSession
from app.errors import DependencyTimeout

PROBLEM = "application/problem+json"


async def backend_pid(res) -> int:
    async with res.sessionmaker() as s:
        return int((await s.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_statement_past_the_statement_timeout_is_503_and_the_connection_stays(
    app_factory, database_url: str, ns: str
) -> None:
    async with app_factory(statement_timeout_ms=100, db_pool_size=1, db_max_overflow=0) as client:
        client.headers["X-Namespace"] = ns
        assert (await client.get("/v1/robots")).status_code == 200
        res = client.app.state.components
        pool, pid = res.engine.pool, await backend_pid(res)

        # Another session holds the robot table: the request's statements wait for it until
        # the server cancels them.
        other = create_engine(Settings(_env_file=None, database_url=database_url))
        try:
            async with other.connect() as conn:
                await conn.execute(text("LOCK TABLE robot IN ACCESS EXCLUSIVE MODE"))
                listed = await client.get("/v1/robots")
                added = await client.post(
                    "/v1/robots/slow/memories",
                    json={"key": "k", "content": "never stored", "embedding": [1.0] + [0.0] * 383},
                )
                await conn.rollback()
        finally:
            await other.dispose()
        for r in (listed, added):
            assert (r.status_code, r.headers["content-type"]) == (503, PROBLEM)
            body = r.json()
            assert body["type"] == "https://htm.dev/problems/timeout"
            assert body["dependency"] == "postgres"
            assert body["detail"] == "the database did not finish in time; nothing was written"

        # Rolled back, nothing written; the same connection serves the next requests.
        assert (await client.get("/v1/robots/slow/memories/k")).status_code == 404
        assert (await client.get("/v1/robots")).status_code == 200
        assert res.engine.pool is pool and pool.checkedin() == 1
        assert await backend_pid(res) == pid


async def test_every_connection_carries_the_statement_timeout(database_url: str) -> None:
    for ms, shown in ((5000, "5s"), (250, "250ms"), (0, "0")):
        engine = create_engine(
            Settings(_env_file=None, database_url=database_url, statement_timeout_ms=ms)
        )
        try:
            async with engine.connect() as conn:
                assert (await conn.execute(text("SHOW statement_timeout"))).scalar_one() == shown
        finally:
            await engine.dispose()
    assert Settings(_env_file=None).statement_timeout_ms == 5000


async def test_a_client_side_command_timeout_drops_only_its_own_connection(
    database_url: str,
) -> None:
    # No server-side limit here, and a client that gives up after 0.3 s.
    engine = create_async_engine(
        database_url,
        pool_size=2,
        max_overflow=0,
        connect_args={"command_timeout": 0.3, "server_settings": {"statement_timeout": "0"}},
    )
    try:
        async with DbSession(engine) as a, DbSession(engine) as b:  # two pooled connections
            pids = {(await s.execute(text("SELECT pg_backend_pid()"))).scalar_one() for s in (a, b)}
        pool = engine.pool
        assert pool.checkedin() == 2

        async with DbSession(engine) as s:
            slow = (await s.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            with pytest.raises(DependencyTimeout) as err:
                await s.execute(text("SELECT pg_sleep(5)"))
        assert isinstance(err.value.__cause__, TimeoutError)
        assert (err.value.status, err.value.extra) == (503, {"dependency": "postgres"})

        # The pool is the same and kept its other connection; only the timed-out one was
        # dropped (an invalidated slot reconnects when next checked out). Disposing of the
        # pool would have closed both.
        assert engine.pool is pool
        async with DbSession(engine) as a, DbSession(engine) as b:
            now = {(await s.execute(text("SELECT pg_backend_pid()"))).scalar_one() for s in (a, b)}
        assert pids - {slow} < now and slow not in now
    finally:
        await engine.dispose()
