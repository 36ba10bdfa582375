"""Robot and namespace statistics over HTTP (issue 4, item 6), with a frozen service clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
import redis.asyncio as aioredis
import tiktoken
from sqlalchemy import text

from app.working_memory.store import robot_keys
from tests.cluster import connect
from tests.vectors import ELEMENT_BYTES

ENC = tiktoken.get_encoding("cl100k_base")
DAY1 = datetime(2031, 5, 6, 22, 30, tzinfo=UTC)
DAY2 = datetime(2031, 5, 7, 0, 15, tzinfo=UTC)  # 1h45 later, but the next UTC day


class Clock:
    def __init__(self) -> None:
        self.t = DAY1

    def __call__(self) -> datetime:
        return self.t


def text_of(tokens: int, word: str) -> str:
    content = word + " apple" * (tokens - len(ENC.encode(word)))
    assert len(ENC.encode(content)) == tokens
    return content


def vec(i: int, dim: int = 384) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


@pytest.fixture
async def client(app_factory, ns: str) -> AsyncIterator[httpx.AsyncClient]:
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        c.clock = Clock()  # type: ignore[attr-defined]
        c.app.state.components.clock.set(c.clock)
        yield c


async def add(client, robot: str, key: str, tokens: int, **fields) -> dict:
    word = fields.pop("word", "note")
    r = await client.post(
        f"/v1/robots/{robot}/memories",
        json={"key": key, "content": text_of(tokens, word), **fields},
    )
    assert r.status_code == 201, r.text
    return r.json()


async def get_ok(client, path: str, **params) -> dict:
    r = await client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
async def two_days(client) -> None:
    """Robot a (budget 30) over two UTC days: 4 adds, one of them forgotten, 1 recall of 2
    hits, 2 evictions. Robot b adds once. The clock stops on day 2."""
    assert (await client.put("/v1/robots/a", json={"working_memory_budget": 30})).is_success
    await add(client, "a", "a1", 8, created_at="2030-01-01T00:00:00Z", word="walrus")
    await add(
        client, "a", "a2", 10, type="preference", importance=2,
        created_at="2030-06-01T12:00:00Z", embedding=vec(1),
    )  # fmt: skip
    client.clock.t = DAY2
    a3 = await add(client, "a", "a3", 14, importance=3, created_at="2031-05-07T00:10:00Z")
    assert a3["working_memory"]["evicted"] == ["a1"]
    await add(client, "a", "gone", 2, importance=9, type="decision")
    assert (await client.delete("/v1/robots/a/memories/gone")).status_code == 200
    await add(client, "b", "b1", 4, importance=5, word="walrus")
    r = await client.post("/v1/robots/a/recall", json={"query": "walrus", "strategy": "fulltext"})
    assert sorted(r.json()["working_memory"]["loaded"]) == ["a1", "b1"]
    assert r.json()["working_memory"]["evicted"] == ["a2"]


async def test_robot_stats_report_both_tiers_and_activity_per_day(client, two_days) -> None:
    stats = await get_ok(client, "/v1/robots/a/stats")
    assert stats == {
        "robot": "a",
        "working_memory": {
            "group": None,
            "tokens": 26,
            "max_tokens": 30,
            "utilization": 86.67,
            "items": 3,
            "degraded": False,
        },
        "long_term": {
            "memories": 3,
            "by_type": {"fact": 2, "preference": 1},
            "oldest": "2030-01-01T00:00:00Z",
            "newest": "2031-05-07T00:10:00Z",
            "pending_embeddings": 2,
            "failed_embeddings": 0,
        },
        "activity": [
            {"day": "2031-05-06", "adds": 2, "recalls": 0, "evictions": 0},
            {"day": "2031-05-07", "adds": 2, "recalls": 2, "evictions": 2},
        ],
    }


async def test_activity_covers_the_last_n_days_up_to_the_clocks_today(client, two_days) -> None:
    day2 = {"day": "2031-05-07", "adds": 2, "recalls": 2, "evictions": 2}
    assert (await get_ok(client, "/v1/robots/a/stats", days=1))["activity"] == [day2]
    client.clock.t = DAY1
    assert (await get_ok(client, "/v1/robots/a/stats", days=1))["activity"] == [
        {"day": "2031-05-06", "adds": 2, "recalls": 0, "evictions": 0}
    ]
    b = await get_ok(client, "/v1/robots/b/stats")
    assert b["activity"] == []  # b's add happened on day 2
    client.clock.t = DAY2
    b = await get_ok(client, "/v1/robots/b/stats")
    assert b["activity"] == [{"day": "2031-05-07", "adds": 1, "recalls": 0, "evictions": 0}]
    assert b["long_term"]["by_type"] == {"fact": 1}
    for params in ({"days": 0}, {"days": 367}):
        r = await client.get("/v1/robots/a/stats", params=params)
        assert (r.status_code, r.headers["content-type"]) == (422, "application/problem+json")
    r = await client.get("/v1/robots/nobody/stats")
    assert (r.status_code, r.headers["content-type"]) == (404, "application/problem+json")


async def test_stats_rebuild_a_lost_working_memory_instead_of_reporting_degraded(
    client, two_days, ns, redis_url
) -> None:
    before = (await get_ok(client, "/v1/robots/a/stats"))["working_memory"]
    robots_before = (await get_ok(client, "/v1/stats"))["robots"]
    assert [(u["robot"], u["working_memory"]["items"]) for u in robots_before] == [
        ("a", 3),
        ("b", 1),
    ]
    async with connect(redis_url) as r:
        assert await r.delete(*robot_keys(ns, "a")) >= 1
    # Redis is up but lost the robot's data: the namespace's stats (read for all robots in
    # one round trip) rebuild it, and so do the robot's; neither is degraded.
    assert (await get_ok(client, "/v1/stats"))["robots"] == robots_before
    async with connect(redis_url) as r:
        assert await r.delete(*robot_keys(ns, "a")) >= 1
    assert (await get_ok(client, "/v1/robots/a/stats"))["working_memory"] == before
    wm = await get_ok(client, "/v1/robots/a/working-memory")
    assert sorted(i["key"] for i in wm["items"]) == ["a1", "a3", "b1"]
    # A robot that exists but never held anything reports an empty, healthy working memory.
    assert (await client.put("/v1/robots/idle", json={"working_memory_budget": 7})).is_success
    assert (await get_ok(client, "/v1/robots/idle/stats"))["working_memory"] == {
        "group": None,
        "tokens": 0,
        "max_tokens": 7,
        "utilization": 0.0,
        "items": 0,
        "degraded": False,
    }


async def test_namespace_stats_count_memories_robots_size_and_versions(
    client, two_days, ns, redis_url
) -> None:
    stats = await get_ok(client, "/v1/stats")
    async with client.app.state.components.engine.connect() as conn:
        pg = (await conn.execute(text("SHOW server_version"))).scalar_one()
        vector = (
            await conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
        ).scalar_one()
        timescaledb = (
            await conn.execute(
                text("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
            )
        ).scalar_one_or_none()
    # What the catalog says, not an assumption: the suite also runs against TimescaleDB.
    hypertables = ["memory", "memory_event"] if timescaledb else []
    async with aioredis.from_url(redis_url, decode_responses=True) as r:
        redis_version = (await r.info("server"))["redis_version"]
    assert stats["memory_bytes"] == await memory_bytes_by_sql(client, ns)
    assert {k: v for k, v in stats.items() if k != "memory_bytes"} == {
        "namespace": ns,
        "memories": 4,  # a1, a2, a3, b1; "gone" is soft-deleted
        "deleted_memories": 1,
        "pending_embeddings": 3,
        "failed_embeddings": 0,
        "robots": [
            {
                "robot": "a",
                "working_memory": {
                    "group": None,
                    "tokens": 26,
                    "max_tokens": 30,
                    "utilization": 86.67,
                    "items": 3,
                    "degraded": False,
                },
            },
            {
                "robot": "b",
                "working_memory": {
                    "group": None,
                    "tokens": 4,
                    "max_tokens": 128000,
                    "utilization": 0.0,
                    "items": 1,
                    "degraded": False,
                },
            },
        ],
        "hypertables": hypertables,
        "versions": {
            "postgres": pg,
            "pgvector": vector,
            "timescaledb": timescaledb,
            "redis": redis_version,
        },
        # no embedder in this app: no query was embedded
        "query_embedding_cache": {
            "entries": 0,
            "max_entries": 10_000,
            "hits": 0,
            "misses": 0,
            "hit_ratio": None,
        },
    }


async def test_namespace_stats_see_only_their_own_namespace(app_factory, ns) -> None:
    async with app_factory() as client:
        client.headers["X-Namespace"] = ns
        stats = await get_ok(client, "/v1/stats")
        assert (stats["namespace"], stats["memories"], stats["robots"], stats["memory_bytes"]) == (
            ns,
            0,
            [],
            0,
        )


async def memory_bytes_by_sql(client, namespace: str) -> int:
    """The namespace's rows, column by column, as stored (soft-deleted rows included)."""
    async with client.app.state.components.engine.connect() as conn:
        return (
            await conn.execute(
                text("""
                SELECT coalesce(sum(pg_column_size(m.content)), 0)
                     + coalesce(sum(pg_column_size(m.metadata)), 0)
                     + coalesce(sum(pg_column_size(m.tags)), 0)
                     + coalesce(sum(pg_column_size(m.embedding)), 0)
                FROM memory m JOIN namespace n ON n.id = m.namespace_id
                WHERE n.name = :ns"""),
                {"ns": namespace},
            )
        ).scalar_one()


async def test_namespace_stats_report_the_size_of_their_own_memories_only(
    app_factory,
) -> None:
    # Two namespaces with the same memories but for 300 more content bytes in b's second one
    # (random letters: too short and too random for compression; a 4-byte header either way).
    import random
    import uuid

    rng = random.Random(7)
    letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(600))
    ns_a, ns_b = f"a-{uuid.uuid4().hex[:10]}", f"b-{uuid.uuid4().hex[:10]}"
    async with app_factory() as client:
        for ns, content in ((ns_a, letters[:300]), (ns_b, letters)):
            client.headers["X-Namespace"] = ns
            # Every row stays under TOAST's threshold (~2 kB) with either vector storage, so
            # nothing is compressed or moved out of line in one namespace and not the other.
            for body in (
                {"key": "one", "content": "first", "tags": ["x:y"], "embedding": vec(3)},
                {"key": "two", "content": content, "metadata": {"n": 1}},
            ):
                assert (await client.post("/v1/robots/r/memories", json=body)).status_code == 201
        assert (await client.delete("/v1/robots/r/memories/one")).status_code == 200  # in b
        sizes = {}
        for ns in (ns_a, ns_b):
            client.headers["X-Namespace"] = ns
            stats = await get_ok(client, "/v1/stats")
            sizes[ns] = stats["memory_bytes"]
            assert sizes[ns] == await memory_bytes_by_sql(client, ns)
    # The soft-deleted memory still takes its space; b is a's size plus its 300 bytes.
    assert sizes[ns_b] - sizes[ns_a] == 300
    assert sizes[ns_a] > 384 * ELEMENT_BYTES  # at least the 384-dimension embedding


async def test_activity_days_are_utc_days_whatever_the_session_time_zone(client, two_days) -> None:
    from app.stats.repository import StatsRepository

    async with client.app.state.components.sessionmaker() as s:
        # In New York both days' events fall on May 6 local time.
        await s.execute(text("SET LOCAL TIME ZONE 'America/New_York'"))
        robot_id = (
            await s.execute(
                text("""SELECT r.id FROM robot r JOIN namespace n ON n.id = r.namespace_id
                        WHERE n.name = :ns AND r.name = 'a'"""),
                {"ns": client.headers["X-Namespace"]},
            )
        ).scalar_one()
        rows = await StatsRepository(s).activity(
            robot_id,
            datetime(2031, 5, 1, tzinfo=UTC),
            datetime(2031, 5, 8, tzinfo=UTC),
            timescale=False,
        )
    assert [(r.day.astimezone(UTC).date().isoformat(), r.adds) for r in rows] == [
        ("2031-05-06", 2),
        ("2031-05-07", 2),
    ]


async def test_namespace_stats_rebuild_each_lost_working_memory_once(
    client, two_days, ns, redis_url
) -> None:
    """After Redis lost everything, the first namespace stats rebuild every robot's working
    memory (one that never held anything too, which the rebuild counter, counting rebuilds
    that restore items, leaves out); the next read them all from Redis."""
    assert (await client.put("/v1/robots/idle", json={"working_memory_budget": 7})).is_success
    before = (await get_ok(client, "/v1/stats"))["robots"]
    counts = client.app.state.components.two_tier.counts  # type: ignore[attr-defined]
    async with connect(redis_url) as r:
        for robot in ("a", "b", "idle"):
            await r.delete(*robot_keys(ns, robot))
    rebuilt = counts.rebuilds
    assert (await get_ok(client, "/v1/stats"))["robots"] == before
    assert counts.rebuilds - rebuilt == 2  # a and b
    assert (await get_ok(client, "/v1/stats"))["robots"] == before
    assert counts.rebuilds - rebuilt == 2
