"""Which commits wait for the WAL flush (app.db.sql.RELAXED_FLUSH_CTE).

A transaction that stores or changes what a client is told is stored (a memory, a forget)
always waits; one that only logs a read or mirrors working memory (a recall, a retrieve, an
add's second transaction after its memory committed) sets synchronous_commit=off inside
one of its own statements, so its commit does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text

from app.events.repository import EventRepository
from app.working_memory.repository import MembershipRepository

RELAXED = "set_config('synchronous_commit', 'off', true)"


def vec(i: int) -> list[float]:
    v = [0.0] * 384
    v[i] = 1.0
    return v


@asynccontextmanager
async def committed_transactions(engine: Any) -> AsyncIterator[list[list[str]]]:
    """The statements of every transaction committed meanwhile on the engine's connections,
    in commit order, as the driver sent them (asyncpg's query loggers, attached to each
    connection while it is checked out)."""
    done: list[list[str]] = []
    open_: dict[int, list[str]] = {}
    attached: dict[int, tuple[Any, Any]] = {}

    def on_checkout(dbapi_connection, record, proxy):  # type: ignore[no-untyped-def]
        driver = dbapi_connection.driver_connection
        key = id(driver)

        def log(q):  # type: ignore[no-untyped-def]
            if q.query.startswith("BEGIN"):
                open_[key] = []
            elif q.query.startswith("COMMIT"):
                done.append(open_.pop(key, []))
            elif q.query.startswith("ROLLBACK"):
                open_.pop(key, None)
            else:
                open_.setdefault(key, []).append(q.query)

        driver.add_query_logger(log)
        attached[key] = (driver, log)

    def on_checkin(dbapi_connection, record):  # type: ignore[no-untyped-def]
        if dbapi_connection is not None:
            driver, log = attached.pop(id(dbapi_connection.driver_connection), (None, None))
            if driver is not None:
                driver.remove_query_logger(log)

    sync = engine.sync_engine
    event.listen(sync, "checkout", on_checkout)
    event.listen(sync, "checkin", on_checkin)
    try:
        yield done
        await asyncio.sleep(0)  # asyncpg calls its query loggers on the next loop turn
    finally:
        event.remove(sync, "checkout", on_checkout)
        event.remove(sync, "checkin", on_checkin)


def relaxed(transaction: list[str]) -> bool:
    return any(RELAXED in s for s in transaction)


def the(transactions: list[list[str]], marker: str) -> list[str]:
    [found] = [t for t in transactions if any(marker in s for s in t)]
    return found


async def test_only_log_and_mirror_transactions_skip_the_flush_wait(client) -> None:
    engine = client.app.state.components.engine
    async with committed_transactions(engine) as txs:
        body = {"content": "durable", "key": "d1", "embedding": vec(1)}
        assert (await client.post("/v1/robots/a/memories", json=body)).status_code == 201
    # The memory's transaction waits; the working-memory mirror after it does not.
    assert not relaxed(the(txs, "INSERT INTO memory "))
    assert relaxed(the(txs, "INSERT INTO working_memory_item"))

    async with committed_transactions(engine) as txs:
        r = await client.post(
            "/v1/robots/b/recall",
            json={"query": "durable", "strategy": "vector", "embedding": vec(1)},
        )
        assert (r.status_code, [h["key"] for h in r.json()["hits"]]) == (200, ["d1"])
    assert relaxed(the(txs, "INSERT INTO memory_event"))

    async with committed_transactions(engine) as txs:
        assert (await client.get("/v1/robots/c/memories/d1")).status_code == 200
    assert relaxed(the(txs, "INSERT INTO memory_event"))

    # A forget is acknowledged: its transaction waits, though it also updates the mirror.
    async with committed_transactions(engine) as txs:
        assert (await client.delete("/v1/robots/a/memories/d1")).status_code == 200
    assert not relaxed(the(txs, "UPDATE memory SET deleted_at"))


async def test_the_setting_takes_effect_and_ends_with_the_transaction(client, ns) -> None:
    body = {"content": "x", "key": "k", "embedding": vec(2)}
    added = (await client.post("/v1/robots/a/memories", json=body)).json()
    res = client.app.state.components
    show = text("SELECT current_setting('synchronous_commit')")
    async with res.sessionmaker() as s:
        ids = (
            await s.execute(
                text(
                    "SELECT n.id AS ns, r.id AS robot FROM namespace n"
                    " JOIN robot r ON r.namespace_id = n.id WHERE n.name = :ns AND r.name = 'a'"
                ),
                {"ns": ns},
            )
        ).one()
        events = EventRepository(s)
        await events.record(ids.ns, "access", ids.robot, memory_ids=[added["id"]])
        assert (await s.execute(show)).scalar_one() == "on"
        await events.record(
            ids.ns, "access", ids.robot, memory_ids=[added["id"]], wait_for_flush=False
        )
        assert (await s.execute(show)).scalar_one() == "off"
        await s.commit()
        assert (await s.execute(show)).scalar_one() == "on"  # transaction-local

        # The working-memory lock of a change: a clear (durable) waits, a place does not.
        members = MembershipRepository(s, ids.ns)
        await members.lock(ids.ns, ids.robot, 100, relaxed=False)
        assert (await s.execute(show)).scalar_one() == "on"
        await s.rollback()
        locked = await members.lock(ids.ns, ids.robot, 100)
        assert locked is not None and locked.budget == 100
        assert (await s.execute(show)).scalar_one() == "off"
        await s.rollback()
