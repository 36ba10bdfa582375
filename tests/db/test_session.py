"""The request's unit of work (app.db.session.DbSession) when the server ends a connection."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.engine import create_engine

PROBLEM = "application/problem+json"


@pytest.fixture
async def client(app_factory, ns: str):  # type: ignore[no-untyped-def]
    # No background pass of the repair worker: the app holds exactly one pooled connection.
    async with app_factory(working_memory_repair_interval_s=3600) as c:
        c.headers["X-Namespace"] = ns
        yield c


def memory(key: str) -> dict[str, object]:
    return {"content": f"note {key}", "key": key, "embedding": [1.0] + [0.0] * 383}


async def test_a_connection_the_server_ended_is_503_writes_nothing_and_the_pool_recovers(
    client, database_url: str
) -> None:
    assert (await client.post("/v1/robots/a/memories", json=memory("k1"))).status_code == 201
    res = client.app.state.components
    async with res.sessionmaker() as s:  # the app's one pooled connection so far
        pid = (await s.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    admin = create_engine(Settings(database_url=database_url))
    try:
        async with admin.connect() as conn:
            ended = text("SELECT pg_terminate_backend(:pid)")
            assert (await conn.execute(ended, {"pid": pid})).scalar_one() is True
    finally:
        await admin.dispose()

    r = await client.post("/v1/robots/a/memories", json=memory("k2"))
    assert (r.status_code, r.headers["content-type"]) == (503, PROBLEM)
    assert r.json()["dependency"] == "postgres"
    # The broken connection left the pool: the next request gets a new one.
    assert (await client.post("/v1/robots/a/memories", json=memory("k3"))).status_code == 201
    statuses = [
        (await client.get(f"/v1/robots/a/memories/{k}")).status_code for k in ("k1", "k2", "k3")
    ]
    assert statuses == [200, 404, 200]


async def test_a_commit_on_a_connection_the_server_closed_is_503_not_500(
    client, database_url: str
) -> None:
    """asyncpg notices the closed socket before the COMMIT is sent and raises its own
    InterfaceError ("the underlying connection is closed"), not a SQLSTATE: still a 503."""
    import asyncio

    from app.errors import ServiceUnavailable

    res = client.app.state.components
    admin = create_engine(Settings(database_url=database_url))
    try:
        async with res.sessionmaker() as s:
            pid = (await s.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            async with admin.connect() as conn:
                await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            await asyncio.sleep(0.3)  # the driver reads the server's goodbye and closes
            with pytest.raises(ServiceUnavailable) as caught:
                await s.commit()
            assert caught.value.extra.get("dependency") == "postgres"
    finally:
        await admin.dispose()


async def test_a_citus_worker_out_of_reach_is_503_and_keeps_the_connection(client) -> None:
    """Citus reports a worker it cannot reach as XX000 "failure on connection marked as
    essential", as 08006 (ERRCODE_CONNECTION_FAILURE, the class of a lost connection)
    "connection to the remote node ... failed", or, when the worker stopped under the
    statement, XX000 "server closed the connection unexpectedly": a 503 (app.errors.
    is_node_unreachable), on the same connection, still good (dropping it, and the pool with
    it, made every request open a connection anew while a worker was down). Any other XX000
    stays an error of its own. Raised here by the server itself, with Citus's words."""
    from app.db.session import DbSession
    from app.errors import ServiceUnavailable

    def raising(state: str, message: str) -> str:
        raise_it = f"RAISE EXCEPTION USING ERRCODE = '{state}', MESSAGE = '{message}'"
        return f"DO $$ BEGIN {raise_it}; END $$"

    res = client.app.state.components
    async with res.sessionmaker() as s:
        assert isinstance(s, DbSession)
        pid = (await s.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        await s.rollback()
        for state, words in (
            ("XX000", "failure on connection marked as essential: 127.0.0.1:9700"),
            (
                "08006",
                "connection to the remote node postgres@127.0.0.1:9700 failed with the "
                "following error: Connection refused",
            ),
            (
                "XX000",
                "server closed the connection unexpectedly\n\tThis probably means the server "
                "terminated abnormally\n\tbefore or while processing the request.",
            ),
        ):
            with pytest.raises(ServiceUnavailable) as caught:
                await s.execute(text(raising(state, words)))
            assert caught.value.status == 503
            await s.rollback()
            assert (await s.execute(text("SELECT pg_backend_pid()"))).scalar_one() == pid
            await s.rollback()
        with pytest.raises(Exception) as other:
            await s.execute(text(raising("XX000", "some other internal error")))
        assert not isinstance(other.value, ServiceUnavailable)
        await s.rollback()
