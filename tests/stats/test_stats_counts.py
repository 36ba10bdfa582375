"""Statistics from counters (migration 0004) equal statistics from counting the rows.

`Counted` below is the statistics SQL as it was before the counters: it counts the memories
and events on every call. A mixed workload (single, batch and concurrent adds by several
robots, replaces, a replace that moves created_at, soft and hard forgets, a restore, the
embedding worker's updates, recalls that evict, retrieves, bulk SQL) is checked against it
after every step: robot statistics, activity per day and namespace statistics, number for
number. The migration's backfill is checked the same way, and so is the striping of the
counter rows between concurrent transactions.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.session import DbSession
from app.db.sql import sql
from app.memories.embedding_repository import EmbeddingRepository
from app.stats.repository import StatsRepository

# The statistics SQL before the counters (app/stats/repository.py at 759606b, plain tables).
_BYTES = (
    "coalesce(pg_column_size(content), 0) + coalesce(pg_column_size(metadata), 0)"
    " + coalesce(pg_column_size(tags), 0) + coalesce(pg_column_size(embedding), 0)"
)
COUNTED_LONG_TERM = """
    SELECT count(*) AS memories,
           min(created_at) AS oldest, max(created_at) AS newest,
           count(*) FILTER (WHERE embedding_status = 'pending') AS pending,
           count(*) FILTER (WHERE embedding_status = 'failed') AS failed
    FROM memory
    WHERE namespace_id = :ns AND author_robot_id = :robot AND deleted_at IS NULL"""
COUNTED_BY_TYPE = """
    SELECT type, count(*) FROM memory
    WHERE namespace_id = :ns AND author_robot_id = :robot AND deleted_at IS NULL
    GROUP BY type ORDER BY type"""
COUNTED_ACTIVITY = """
    SELECT date_trunc('day', at, 'UTC') AS day,
           count(*) FILTER (WHERE kind = 'add') AS adds,
           count(*) FILTER (WHERE kind = 'recall') AS recalls,
           count(*) FILTER (WHERE kind = 'evict') AS evictions
    FROM memory_event
    WHERE robot_id = :robot AND at >= :since AND at < :until
    GROUP BY 1 ORDER BY 1"""
COUNTED_NAMESPACE = f"""
    SELECT count(*) FILTER (WHERE deleted_at IS NULL) AS memories,
           count(*) FILTER (WHERE deleted_at IS NOT NULL) AS deleted,
           count(*) FILTER (WHERE embedding_status = 'pending'
                            AND deleted_at IS NULL) AS pending_embeddings,
           count(*) FILTER (WHERE embedding_status = 'failed'
                            AND deleted_at IS NULL) AS failed_embeddings,
           coalesce(sum({_BYTES}), 0)::bigint AS memory_bytes
    FROM memory WHERE namespace_id = :ns"""


async def counted_long_term(s: DbSession, ns: int, robot: int) -> dict[str, Any]:
    p = {"ns": ns, "robot": robot}
    row = (await s.execute(sql(COUNTED_LONG_TERM), p)).one()
    return {**row._asdict(), "by_type": dict((await s.execute(sql(COUNTED_BY_TYPE), p)).all())}


async def counted_activity(s: DbSession, robot: int, since: datetime, until: datetime) -> list:
    p = {"robot": robot, "since": since, "until": until}
    return [tuple(r) for r in await s.execute(sql(COUNTED_ACTIVITY), p)]


async def counted_namespace(s: DbSession, ns: int) -> dict[str, Any]:
    return (await s.execute(sql(COUNTED_NAMESPACE), {"ns": ns})).one()._asdict()


async def assert_counters_equal_counting(engine: AsyncEngine, ns: int) -> dict[str, Any]:
    """Every robot of the namespace and the namespace itself, both ways; returns the
    namespace's statistics."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since, until = today - timedelta(days=400), today + timedelta(days=2)
    async with DbSession(engine) as s:
        repo = StatsRepository(s)
        robots = (
            await s.execute(sql("SELECT id FROM robot WHERE namespace_id = :ns"), {"ns": ns})
        ).scalars()
        for robot in robots:
            counters = await repo.long_term(ns, robot)
            counted = await counted_long_term(s, ns, robot)
            assert counters == counted
            # by_type in the same order (the response's JSON object keeps it)
            assert list(counters["by_type"]) == list(counted["by_type"])
            activity = [tuple(r) for r in await repo.activity(robot, since, until, False)]
            assert activity == await counted_activity(s, robot, since, until)
        stats = await repo.namespace(ns)
        assert stats == await counted_namespace(s, ns)
        await s.rollback()
    return stats


# --- the workload -----------------------------------------------------------------------


@dataclass
class Model:
    """What the workload did, memory by memory: (robot, type, deleted, embedded)."""

    memories: dict[str, list[Any]] = field(default_factory=dict)

    def by_type(self, robot: str) -> dict[str, int]:
        return dict(
            sorted(
                Counter(m[1] for m in self.memories.values() if m[0] == robot and not m[2]).items()
            )
        )

    def totals(self) -> dict[str, int]:
        live = [m for m in self.memories.values() if not m[2]]
        return {
            "memories": len(live),
            "deleted": len(self.memories) - len(live),
            "pending_embeddings": sum(m[3] == "pending" for m in live),
            "failed_embeddings": sum(m[3] == "failed" for m in live),
        }


def vec(i: int) -> list[float]:
    v = [0.0] * 384
    v[i % 384] = 1.0
    return v


def body(key: str, n: int, type_: str = "fact", embedded: bool = False, **more: Any) -> dict:
    words = ("walrus", "harbour", "lantern", "copper", "meadow")
    content = more.pop("content", f"{words[n % 5]} memory {key} number {n}")
    b = {"key": key, "content": content, "type": type_, **more}
    if embedded:
        b["embedding"] = vec(n)
    return b


async def add(c: httpx.AsyncClient, model: Model, robot: str, b: dict) -> None:
    r = await c.post(f"/v1/robots/{robot}/memories", json=b)
    assert r.status_code == 201, r.text
    model.memories[b["key"]] = [robot, b["type"], False, "ready" if "embedding" in b else "pending"]


async def add_batch(c: httpx.AsyncClient, model: Model, robot: str, bodies: list[dict]) -> None:
    r = await c.post(f"/v1/robots/{robot}/memories/batch", json={"memories": bodies})
    assert r.status_code == 201, r.text
    for b in bodies:
        status = "ready" if "embedding" in b else "pending"
        model.memories[b["key"]] = [robot, b["type"], False, status]


async def test_counters_equal_counting_through_a_mixed_workload(client, ns: str) -> None:
    engine = client.app.state.components.engine
    model = Model()
    n = itertools.count()
    assert (await client.put("/v1/robots/a", json={"working_memory_budget": 60})).is_success

    async def check() -> dict[str, Any]:
        ns_id = await _scalar(engine, "SELECT id FROM namespace WHERE name = :n", {"n": ns})
        stats = await assert_counters_equal_counting(engine, ns_id)
        assert {k: v for k, v in stats.items() if k != "memory_bytes"} == model.totals()
        async with DbSession(engine) as s:
            for robot in {m[0] for m in model.memories.values()}:
                robot_id = (
                    await s.execute(
                        sql("SELECT id FROM robot WHERE namespace_id = :ns AND name = :r"),
                        {"ns": ns_id, "r": robot},
                    )
                ).scalar_one()
                long_term = await StatsRepository(s).long_term(ns_id, robot_id)
                assert long_term["by_type"] == model.by_type(robot)
            await s.rollback()
        return stats

    # Single adds: types, with and without a vector, old created_at; a long text TOAST
    # compresses in place and a long incompressible one goes out of line (bytes as stored).
    for i, type_ in enumerate(["fact", "preference", "fact", "decision"]):
        k = next(n)
        await add(client, model, "a", body(f"a{k}", k, type_, embedded=i % 2 == 0,
                                            created_at=f"203{i}-01-01T00:00:00Z"))  # fmt: skip
    await add(client, model, "a", body("long", next(n), content="walrus harbour " * 400))
    # A short text beside a real (incompressible) vector: the row is too long for the page
    # and TOAST compresses the text in place, which an AFTER INSERT trigger's NEW does not
    # show (pg_column_size(NEW.content) is the uncompressed size there). 1,400 characters:
    # the row passes TOAST's ~2 kB threshold with a halfvec embedding (776 bytes) too.
    rng = random.Random(16)
    noisy = [rng.uniform(-1, 1) for _ in range(384)]
    await add(client, model, "c", body("mid", next(n), content="copper " * 200, embedding=noisy))
    await add(client, model, "b", body("noise", next(n), content=os.urandom(3000).hex()))
    await check()

    # A batch (one statement, several types), then batches and single adds at once.
    await add_batch(client, model, "b", [
        body(f"b{k}", k, ["fact", "note", "decision"][k % 3], embedded=k % 2 == 0)
        for k in itertools.islice(n, 9)
    ])  # fmt: skip
    singles = [(robot, body(f"{robot}{k}", k, embedded=k % 3 == 0))
               for robot in ("a", "b", "c") for k in itertools.islice(n, 8)]  # fmt: skip
    batches = [(robot, [body(f"{robot}{k}", k, "note") for k in itertools.islice(n, 5)])
               for robot in ("b", "c")]  # fmt: skip
    await asyncio.gather(
        *(add(client, model, robot, b) for robot, b in singles),
        *(add_batch(client, model, robot, bs) for robot, bs in batches),
    )
    await check()

    # Replaces: another type and text; a pending memory given its vector; a move of
    # created_at (a delete and an insert in one statement); a PUT that changes nothing.
    for _ in range(2):  # the second PUT changes nothing and writes nothing
        r = await client.put("/v1/robots/a/memories/a0", json={
            "content": "walrus, replaced", "type": "preference"})  # fmt: skip
        assert r.status_code == 200, r.text
    model.memories["a0"][1:] = ["preference", False, "pending"]
    r = await client.put("/v1/robots/a/memories/a1", json={
        "content": model_content(model, "a1"), "type": "preference", "embedding": vec(1),
        "created_at": "2035-01-01T00:00:00Z"})  # fmt: skip
    assert r.status_code == 200, r.text
    model.memories["a1"][1:] = ["preference", False, "ready"]
    r = await client.put("/v1/robots/b/memories/a3", json={
        "content": "short now", "created_at": "2029-06-01T00:00:00Z"})  # fmt: skip
    assert r.status_code == 200, r.text
    model.memories["a3"][1:] = ["fact", False, "pending"]  # a replace keeps the author
    await check()

    # A version restored (a replace like a PUT: the old type back, embedded again), then a
    # tag subtree renamed into an existing tag (tags are part of a row's bytes).
    r = await client.post("/v1/robots/a/memories/a0/versions/1/restore")
    assert (r.status_code, r.json()["type"]) == (200, "fact"), r.text
    model.memories["a0"][1:] = ["fact", False, "pending"]
    for key in ("a0", "b9"):
        r = await client.put(f"/v1/robots/a/memories/{key}", json={
            "content": model_content(model, key), "type": model.memories[key][1],
            "tags": ["topic:sea:walrus", "archive"]})  # fmt: skip
        assert r.status_code == 200, r.text
    r = await client.post("/v1/tags/rename", json={"from": "topic", "to": "archive:topics"})
    assert r.json()["memories"] == 2, r.text
    await check()

    # Forgets: soft, a restore, hard (of a soft-deleted one and of a live one).
    for robot, key in (("a", "a2"), ("b", "b7"), ("c", "c32"), ("c", "c33")):
        assert (await client.delete(f"/v1/robots/{robot}/memories/{key}")).status_code == 200
        model.memories[key][2] = True
    assert (await client.post("/v1/robots/c/memories/c32/restore")).status_code == 200
    model.memories["c32"][2] = False
    for key in ("c33", "b8"):
        r = await client.delete(f"/v1/robots/c/memories/{key}", params={"hard": "true",
                                                                      "confirm": key})  # fmt: skip
        assert r.status_code == 200, r.text
        del model.memories[key]
    stats = await check()
    assert stats["deleted"] == 2

    # The embedding worker's two updates: vectors stored; refusals that give up (failed).
    ns_id = await _scalar(engine, "SELECT id FROM namespace WHERE name = :n", {"n": ns})
    async with DbSession(engine) as s:
        pending = list(
            await s.execute(
                sql("""SELECT id, created_at, md5(content) AS digest, key FROM memory
                       WHERE namespace_id = :ns AND embedding_status = 'pending'
                         AND deleted_at IS NULL ORDER BY key LIMIT 6"""),
                {"ns": ns_id},
            )
        )
        repo = EmbeddingRepository(s)
        await repo.set_embeddings(pending[:3], [vec(i) for i in range(3)], "stub", "vector")
        await repo.postpone_embeddings(pending[3:], "refused", max_backoff_s=60, give_up_after=1)
        await s.commit()
    for row in pending[:3]:
        model.memories[row.key][3] = "ready"
    for row in pending[3:]:
        model.memories[row.key][3] = "failed"
    failed_key = pending[3].key
    assert (await check())["failed_embeddings"] == 3
    # A failed memory replaced by a new text is pending again.
    robot = model.memories[failed_key][0]
    r = await client.put(f"/v1/robots/{robot}/memories/{failed_key}", json={
        "content": "walrus, again", "type": model.memories[failed_key][1]})  # fmt: skip
    assert r.status_code == 200, r.text
    model.memories[failed_key][3] = "pending"
    await check()

    # Events: recalls that load and evict (a's budget is 60 tokens), retrieves (access).
    for query in ("walrus", "harbour", "lantern"):
        r = await client.post("/v1/robots/a/recall", json={"query": query,
                                                            "strategy": "fulltext"})  # fmt: skip
        assert r.status_code == 200, r.text
    for key in ("a3", "b9", "c32"):
        assert (await client.get(f"/v1/robots/c/memories/{key}")).status_code == 200
    await check()

    # Bulk SQL nobody in the service writes: move c's notes to b as facts, delete one row.
    async with DbSession(engine) as s:
        moved = (
            await s.execute(
                sql("""UPDATE memory SET author_robot_id = (SELECT id FROM robot
                           WHERE namespace_id = :ns AND name = 'b'), type = 'fact'
                       WHERE namespace_id = :ns AND type = 'note' AND author_robot_id =
                           (SELECT id FROM robot WHERE namespace_id = :ns AND name = 'c')
                       RETURNING key"""),
                {"ns": ns_id},
            )
        ).scalars()
        await s.execute(
            sql("DELETE FROM memory WHERE namespace_id = :ns AND key = 'b10'"), {"ns": ns_id}
        )
        await s.commit()
    assert len(moved) == 5
    for key in moved:
        model.memories[key][0:2] = ["b", "fact"]
    del model.memories["b10"]
    stats = await check()
    assert stats == {**model.totals(), "memory_bytes": stats["memory_bytes"]}
    assert (stats["memories"], stats["deleted"]) == (45, 2)
    # What the workload was meant to cover did happen: a text stored compressed, one out of
    # line, recalls and evictions logged.
    async with DbSession(engine) as s:
        stored = dict(
            (
                await s.execute(
                    # pg_column_size: compressed size; out of line, the bare text (no header)
                    sql("""SELECT key, CASE sign(pg_column_size(content) - octet_length(content))
                                       WHEN -1 THEN 'compressed' WHEN 0 THEN 'out of line'
                                       ELSE 'inline' END
                           FROM memory WHERE namespace_id = :ns
                             AND key IN ('long', 'noise', 'mid')"""),
                    {"ns": ns_id},
                )
            ).all()
        )
        a_id = (
            await s.execute(
                sql("SELECT id FROM robot WHERE namespace_id = :ns AND name = 'a'"), {"ns": ns_id}
            )
        ).scalar_one()
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        activity = await StatsRepository(s).activity(
            a_id, today - timedelta(days=1), today + timedelta(days=1), False
        )
        await s.rollback()
    assert stored == {"long": "compressed", "noise": "out of line", "mid": "compressed"}
    assert sum(r.recalls for r in activity) > 0 and sum(r.evictions for r in activity) > 0


def model_content(model: Model, key: str) -> str:
    n = int(key[1:])
    return f"{('walrus', 'harbour', 'lantern', 'copper', 'meadow')[n % 5]} memory {key} number {n}"


async def _scalar(engine: AsyncEngine, statement: str, params: dict[str, Any]) -> Any:
    async with DbSession(engine) as s:
        value = (await s.execute(sql(statement), params)).scalar_one()
        await s.rollback()
        return value


# --- striping -----------------------------------------------------------------------------


async def _connect(url: str) -> asyncpg.Connection:
    u = make_url(url)
    return await asyncpg.connect(
        user=u.username, password=u.password, host=u.query.get("host") or u.host,
        port=u.port, database=u.database,
    )  # fmt: skip


async def test_concurrent_writers_never_share_a_counter_row(database_url: str, ns: str) -> None:
    """Three transactions add to one namespace at once: each claims its own stripe (the
    lowest free one) and keeps it for all its writes, so none waits for another's commit."""
    conns = [await _connect(database_url) for _ in range(3)]
    try:
        ns_id = await conns[0].fetchval("INSERT INTO namespace (name) VALUES ($1) RETURNING id", ns)
        robot = await conns[0].fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'r') RETURNING id", ns_id
        )
        insert = """INSERT INTO memory (namespace_id, key, content, author_robot_id,
                                        token_count)
                    VALUES ($1, $2, 'x', $3, 1)"""
        for i, conn in enumerate(conns):
            await conn.execute("BEGIN")
            await conn.execute(insert, ns_id, f"k{i}", robot)
        for i, conn in enumerate(conns):  # a second write keeps the transaction's stripe
            await conn.execute(insert, ns_id, f"again{i}", robot)
        slots = [await c.fetchval("SELECT current_setting('htm.memory_count_slot')") for c in conns]
        for conn in conns:
            await conn.execute("COMMIT")
        rows = await conns[0].fetch(
            "SELECT slot, memories FROM namespace_memory_count WHERE namespace_id = $1", ns_id
        )
    finally:
        for conn in conns:
            await conn.close()
    assert len(set(slots)) == 3
    assert sorted((r["slot"], r["memories"]) for r in rows) == sorted((int(s), 2) for s in slots)


# --- the migration's backfill -------------------------------------------------------------


async def test_the_migration_counts_what_was_there_before_it(database_factory) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy.ext.asyncio import create_async_engine

    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url, "0003")
    conn = await _connect(url)
    try:
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('old') RETURNING id")
        robots = [
            await conn.fetchval(
                "INSERT INTO robot (namespace_id, name) VALUES ($1, $2) RETURNING id", ns, name
            )
            for name in ("a", "b")
        ]
        t0 = datetime(2030, 3, 1, tzinfo=UTC)
        await conn.execute(
            """
            INSERT INTO memory (namespace_id, key, content, type, author_robot_id, token_count,
                                created_at, embedding_status, deleted_at, metadata, tags)
            SELECT $1, 'k' || i, repeat('walrus ', 1 + (i % 7) * 300),
                   (ARRAY['fact', 'note', 'decision'])[1 + i % 3],
                   ($2::bigint[])[1 + i % 2], 1, $3::timestamptz + i * interval '1 hour',
                   (ARRAY['pending', 'ready', 'failed'])[1 + i % 3],
                   CASE WHEN i % 5 = 0 THEN $3::timestamptz END,
                   jsonb_build_object('i', i), ARRAY['t' || i]
            FROM generate_series(1, 60) i""",
            ns, robots, t0,
        )  # fmt: skip
        await conn.execute(
            """
            INSERT INTO memory_event (namespace_id, robot_id, kind, at)
            SELECT $1, CASE WHEN i % 9 = 0 THEN NULL ELSE ($2::bigint[])[1 + i % 2] END,
                   (ARRAY['add', 'recall', 'evict', 'access', 'forget'])[1 + i % 5],
                   now() - i * interval '5 hours'
            FROM generate_series(1, 200) i""",
            ns, robots,
        )  # fmt: skip
    finally:
        await conn.close()

    await asyncio.to_thread(upgrade, url)

    engine = create_async_engine(url)
    try:
        stats = await assert_counters_equal_counting(engine, ns)
    finally:
        await engine.dispose()
    assert {k: v for k, v in stats.items() if k != "memory_bytes"} == {
        "memories": 48,
        "deleted": 12,
        "pending_embeddings": 16,
        "failed_embeddings": 16,
    }
