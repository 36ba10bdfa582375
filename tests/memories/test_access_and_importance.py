"""Importance that learns: access counts gathered off the request's path and written in one
statement, kept through an outage; the heuristic scorer for adds without an importance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.db.engine import create_engine
from app.db.session import create_sessionmaker
from app.errors import ServiceUnavailable
from app.memories.access import AccessTracker
from app.memories.importance import score, signals
from tests.conftest import make_settings

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


async def counts(client) -> dict[str, tuple[int, datetime | None]]:
    items = (await client.get("/v1/robots/a/memories", params={"limit": 100})).json()["items"]
    return {
        m["key"]: (
            m["access_count"],
            datetime.fromisoformat(m["last_accessed_at"]) if m["last_accessed_at"] else None,
        )
        for m in items
    }


@pytest.fixture
async def client(app_factory, ns):
    """An app whose access worker never runs: the tests flush."""
    async with app_factory(access_flush_interval_s=3600) as c:
        c.headers["X-Namespace"] = ns
        yield c


async def test_retrieves_and_recall_hits_are_counted_when_flushed(client) -> None:
    c = client.app.state.components
    now = [T0]
    c.clock.set(lambda: now[0])
    for key, content in (("k1", "apples and pears"), ("k2", "apples"), ("k3", "plums")):
        await client.post("/v1/robots/a/memories", json={"key": key, "content": content})
    await client.get("/v1/robots/a/memories/k1")
    now[0] = T0 + timedelta(minutes=1)
    await client.get("/v1/robots/b/memories/k1")
    r = await client.post("/v1/robots/a/recall", json={"query": "apples", "strategy": "fulltext"})
    assert [h["key"] for h in r.json()["hits"]] == ["k2", "k1"]
    # Nothing is written on the request's path.
    assert await counts(client) == {"k1": (0, None), "k2": (0, None), "k3": (0, None)}
    assert await c.access.flush() == 4
    assert await counts(client) == {
        "k1": (3, T0 + timedelta(minutes=1)),
        "k2": (1, T0 + timedelta(minutes=1)),
        "k3": (0, None),
    }
    assert await c.access.flush() == 0  # nothing new
    # an earlier instant never moves last_accessed_at back
    now[0] = T0
    await client.get("/v1/robots/a/memories/k2")
    await c.access.flush()
    assert (await counts(client))["k2"] == (2, T0 + timedelta(minutes=1))


async def test_a_flush_that_fails_keeps_its_counts_for_the_next(client, database_url) -> None:
    c = client.app.state.components
    await client.post("/v1/robots/a/memories", json={"key": "k1", "content": "x"})
    row_id = (await client.get("/v1/robots/a/memories/k1")).json()["id"]
    c.access.record([row_id], T0)  # the GET above counted once too: 2 pending

    dead = create_engine(
        make_settings("postgresql+asyncpg://htm@127.0.0.1:1/none", "redis://127.0.0.1:1")
    )
    tracker = AccessTracker(create_sessionmaker(dead))
    tracker.record([row_id, row_id], T0)
    with pytest.raises(ServiceUnavailable):
        await tracker.flush()
    assert tracker.pending == 2
    tracker.record([row_id], T0 + timedelta(seconds=5))
    tracker.sessionmaker = c.sessionmaker  # the database is back
    assert await tracker.flush() == 3
    await dead.dispose()
    assert await c.access.flush() == 2
    got = await counts(client)
    assert got["k1"][0] == 5


# The tuples written to each table, as the statistics collector has them.
_TUPLES = """
    SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
    WHERE relname IN ('memory', 'memory_access')"""


async def tuples(sessionmaker) -> dict[str, tuple[int, int, int]]:
    """(inserted, updated, HOT-updated) per table, after `sessionmaker`'s one connection has
    reported what it wrote (a backend reports at most once a second unless forced)."""
    async with sessionmaker() as s, s.begin():
        await s.execute(text("SELECT pg_stat_force_next_flush()"))
    async with sessionmaker() as s, s.begin():
        rows = (await s.execute(text(_TUPLES))).all()
    return {r.relname: (r.n_tup_ins, r.n_tup_upd, r.n_tup_hot_upd) for r in rows}


def written(before: dict, after: dict) -> dict[str, tuple[int, ...]]:
    return {t: tuple(a - b for a, b in zip(after[t], before[t], strict=True)) for t in after}


async def test_a_flush_writes_no_memory_row_and_its_updates_are_hot(
    client, database_url, redis_url
) -> None:
    """Counts live in memory_access (migration 0025). Writing them into `memory` was not a
    heap-only (HOT) update (a wide row, a full page): each added an entry to every index of
    `memory`, HNSW's too (336 ms for ~300 recalled rows). A first access inserts the counts'
    row; the next flush updates every row in place, HOT, even those of a full page (its
    fillfactor leaves room for a new version of each), and `memory` is not written. (Later
    flushes are HOT once pruning has reclaimed the versions before, which a snapshot older
    than them holds back: bench/results/2026-11-28-access-counts.md.)"""
    # More than a page of memory_access holds: every row of a full page is updated at once.
    memories = [{"key": f"h{i}", "content": f"hot update {i}"} for i in range(100)]
    r = await client.post("/v1/robots/a/memories/batch", json={"memories": memories})
    assert r.status_code == 201
    ids = [m["id"] for m in r.json()["memories"]]
    # One connection, so the tracker's writes are what it reports when forced to.
    engine = create_engine(
        make_settings(database_url, redis_url, db_pool_size=1, db_max_overflow=0)
    )
    tracker = AccessTracker(create_sessionmaker(engine))
    try:
        before = await tuples(tracker.sessionmaker)
        tracker.record(ids, T0)
        assert await tracker.flush() == 100
        inserted = await tuples(tracker.sessionmaker)
        assert written(before, inserted) == {"memory": (0, 0, 0), "memory_access": (100, 0, 0)}
        tracker.record(ids, T0 + timedelta(minutes=1))
        tracker.record(ids[:7], T0 + timedelta(minutes=2))
        assert await tracker.flush() == 107
        updated = await tuples(tracker.sessionmaker)
        assert written(inserted, updated) == {"memory": (0, 0, 0), "memory_access": (0, 100, 100)}
    finally:
        await engine.dispose()
    got = await counts(client)
    assert (got["h0"], got["h7"]) == (
        (3, T0 + timedelta(minutes=2)),
        (2, T0 + timedelta(minutes=1)),
    )


async def message_counts(client) -> list[int]:
    """The session's counts as stored, read as a reader (whose read counts nothing)."""
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text(
                "SELECT access_count FROM session_message m JOIN session s ON s.id = m.session_id"
                " JOIN robot r ON r.id = s.robot_id JOIN namespace n ON n.id = r.namespace_id"
                " WHERE s.name = 's' AND r.name = 'a' AND n.name = :ns ORDER BY m.seq"
            ),
            {"ns": client.headers["X-Namespace"]},
        )
        return [r.access_count for r in rows]


async def test_session_messages_a_prompt_takes_are_counted_off_its_path_and_kept_through_an_outage(
    client,
) -> None:
    c = client.app.state.components
    r = await client.post(
        "/v1/robots/a/sessions/s/messages",
        json={"messages": [{"role": "user", "content": f"turn {i}"} for i in range(3)]},
    )
    assert r.status_code == 201, r.text
    prompt = {"input": "and now?", "session": "s", "context_window": 1000, "recall": None}
    for _ in range(2):
        assert (await client.post("/v1/robots/a/prompt", json=prompt)).status_code == 200
    assert await message_counts(client) == [0, 0, 0]  # nothing written on the path
    assert c.access.pending == 6

    dead = create_engine(
        make_settings("postgresql+asyncpg://htm@127.0.0.1:1/none", "redis://127.0.0.1:1")
    )
    live, c.access.sessionmaker = c.access.sessionmaker, create_sessionmaker(dead)
    with pytest.raises(ServiceUnavailable):
        await c.access.flush()
    assert c.access.pending == 6  # kept for the next flush
    c.access.sessionmaker = live
    await dead.dispose()
    assert (await client.post("/v1/robots/a/prompt", json=prompt)).status_code == 200
    assert await c.access.flush() == 9
    assert await message_counts(client) == [3, 3, 3]


@pytest.mark.parametrize(
    ("content", "type_", "metadata", "found", "expected"),
    [
        ("The sky is blue.", "fact", {}, [], 1.0),
        ("My name is Ada.", "fact", {}, ["identity"], 5.0),
        ("Hi, call me   Ada", "fact", {}, ["identity"], 5.0),
        ("I PREFER tea; I prefer it hot", "fact", {}, ["preference"], 4.0),
        ("I liked it", "fact", {}, [], 1.0),  # whole words only
        ("recall me later", "fact", {}, [], 1.0),
        ("Remember that we decided to use Postgres", "fact", {}, ["explicit", "decision"], 8.0),
        ("Decision: ship on Friday", "fact", {}, ["decision"], 4.0),
        ("exit code 0", "tool_result", {}, ["tool_result"], 2.0),
        ("exit code 0", "fact", {"tool": "bash"}, ["tool_result"], 2.0),
        (
            "My name is Ada, remember that I hate mornings and we'll use vim",
            "tool_result",
            {},
            ["identity", "explicit", "preference", "decision", "tool_result"],
            10.0,
        ),
    ],
)
def test_heuristic_signals_and_scores(content, type_, metadata, found, expected) -> None:
    assert signals(content, type_, metadata) == found
    assert score(content, type_, metadata) == expected


async def test_the_scorer_applies_only_to_adds_without_an_importance(app_factory, ns) -> None:
    async with app_factory(importance_scorer="heuristic", dedupe="off") as client:
        client.headers["X-Namespace"] = ns
        bodies = [
            {"key": "k1", "content": "My name is Ada"},
            {"key": "k2", "content": "My name is Ada", "importance": 2},
            {"key": "k3", "content": "the weather"},
        ]
        r = await client.post("/v1/robots/a/memories/batch", json={"memories": bodies})
        assert [m["importance"] for m in r.json()["memories"]] == [5.0, 2.0, 1.0]
    async with app_factory() as client:  # off by default
        client.headers["X-Namespace"] = ns
        r = await client.post("/v1/robots/a/memories", json={"content": "I prefer tea"})
        assert r.json()["importance"] == 1.0
