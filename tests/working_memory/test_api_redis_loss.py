"""Redis losing its data or going away (issue 4, item 7), over HTTP: the working memory is
rebuilt from Postgres membership, identical; while Redis is down every request degrades and
none answers 500. Each test runs its own throwaway redis-server."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis
import tiktoken

from app.embedded import EmbeddedRedis
from app.working_memory.store import robot_keys

T0 = datetime(2031, 5, 6, 8, 0, 0, 123457, tzinfo=UTC)
ENC = tiktoken.get_encoding("cl100k_base")


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def at(self, **delta: float) -> None:
        self.t = T0 + timedelta(**delta)


def text_of(tokens: int, word: str) -> str:
    content = word + " apple" * (tokens - len(ENC.encode(word)))
    assert len(ENC.encode(content)) == tokens
    return content


@pytest.fixture
async def own_db_factory(app_factory, database_factory):  # type: ignore[no-untyped-def]
    """Apps on a database of their own. Other test apps share the session's database and
    run repair workers over every robot in it, against their own Redis: one could rebuild
    these robots' mirrors (and clear their stale marks) while this test's Redis is away."""
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    return functools.partial(app_factory, database_url=url)


@asynccontextmanager
async def app_on(app_factory, server: EmbeddedRedis) -> AsyncIterator[httpx.AsyncClient]:
    # No breaker pause: each request tries Redis again, so a restart is noticed at once.
    async with app_factory(redis_url=server.url, redis_retry_after_s=0) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        client.clock = Clock()  # type: ignore[attr-defined]
        client.app.state.components.clock.set(client.clock)
        yield client


async def add(client, key: str, tokens: int, importance: float, word: str = "note") -> dict:
    r = await client.post(
        "/v1/robots/a/memories",
        json={"key": key, "content": text_of(tokens, word), "importance": importance},
    )
    assert r.status_code == 201, r.text
    return r.json()["working_memory"]


async def prompt(client) -> dict:
    """A prompt of working memory alone, in a window that holds part of it."""
    r = await client.post(
        "/v1/robots/a/prompt",
        json={"input": "What now?", "context_window": 45, "recall": None},
    )
    assert r.status_code == 200, r.text
    return r.json()


def taken(prompted: dict) -> list[str]:
    return [e["key"] for e in prompted["manifest"] if e["key"] and e["included"]]


async def get_ok(client, path: str, **params) -> dict:
    r = await client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def flushall(server: EmbeddedRedis) -> None:
    async with aioredis.from_url(server.url) as r:
        await r.flushall()


@pytest.mark.single_redis("FLUSHALL of its own server")
async def test_flushall_rebuilds_the_identical_working_set(own_db_factory, redis_server_factory):
    server = redis_server_factory.start()
    async with app_on(own_db_factory, server) as client:
        clock = client.clock
        assert (await client.put("/v1/robots/a", json={"working_memory_budget": 40})).is_success
        for minute, (key, tokens, importance, word) in enumerate(
            [("a", 10, 2, "walrus"), ("b", 10, 2, "note"), ("c", 8, 5, "note"), ("d", 6, 1, "x")]
        ):
            clock.at(minutes=minute)
            await add(client, key, tokens, importance, word)
        # A recall re-places `a`, which keeps its age (its slot before b), gains a new last
        # access and from_recall; a read touches `b`; `e` evicts `d`.
        clock.at(minutes=10)
        r = await client.post(
            "/v1/robots/a/recall", json={"query": "walrus", "strategy": "fulltext"}
        )
        assert r.json()["working_memory"]["loaded"] == ["a"]
        clock.at(minutes=11)
        assert (await client.get("/v1/robots/a/memories/b")).status_code == 200
        clock.at(minutes=12)
        assert (await add(client, "e", 9, 3))["evicted"] == ["d"]

        before = await get_ok(client, "/v1/robots/a/working-memory")
        assert [i["key"] for i in before["items"]] == ["a", "b", "e", "c"]
        assert (before["tokens"], before["degraded"]) == (37, False)
        contexts = {
            s: await get_ok(client, "/v1/robots/a/context", strategy=s)
            for s in ("recent", "important", "balanced")
        }

        prompted = await prompt(client)
        assert taken(prompted) == ["c", "e"]  # balanced: c (5, 10 min old), e (3, new); a b: over

        await flushall(server)
        assert await prompt(client) == prompted  # rebuilt from Postgres, then read
        assert await get_ok(client, "/v1/robots/a/working-memory") == before
        for strategy, ctx in contexts.items():
            assert await get_ok(client, "/v1/robots/a/context", strategy=strategy) == ctx

        # Data lost again; this time an add is the first request and finds the rebuilt set.
        await flushall(server)
        clock.at(minutes=13)
        assert await add(client, "f", 5, 1) == {
            "admitted": True,
            "reason": "admitted",
            "evicted": ["a"],
        }
        after = await get_ok(client, "/v1/robots/a/working-memory")
        assert [i["key"] for i in after["items"]] == ["f", "b", "e", "c"]
        assert after["items"][1:] == before["items"][1:]
        assert after["tokens"] == 32


@pytest.mark.single_redis("stops and restarts its own server")
async def test_requests_degrade_while_redis_is_down_and_recover_after(
    own_db_factory, redis_server_factory
) -> None:
    server = redis_server_factory.start()
    async with app_on(own_db_factory, server) as client:
        clock = client.clock
        await add(client, "high", 10, 3, "walrus")
        clock.at(hours=1)
        await add(client, "low", 6, 1)
        clock.at(hours=2)
        before = await get_ok(client, "/v1/robots/a/working-memory")
        ctx = await get_ok(client, "/v1/robots/a/context")
        assert [i["key"] for i in ctx["items"]] == ["high", "low"]
        prompted = await prompt(client)
        assert taken(prompted) == ["high", "low"]

        server.stop()
        assert await add(client, "during", 4, 9, "zebra") == {
            "admitted": False,
            "reason": "unavailable",
            "evicted": [],
        }
        r = await client.post(
            "/v1/robots/a/recall", json={"query": "walrus", "strategy": "fulltext"}
        )
        assert r.status_code == 200
        assert [h["key"] for h in r.json()["hits"]] == ["high"]
        assert r.json()["working_memory"] == {
            "loaded": [],
            "evicted": [],
            "not_admitted": ["high"],
            "pending": [],
            "reason": "unavailable",
        }

        # Context and the working set come from Postgres membership, in the same order.
        down_ctx = await get_ok(client, "/v1/robots/a/context")
        assert down_ctx == {**ctx, "degraded": True}
        down_wm = await get_ok(client, "/v1/robots/a/working-memory")
        assert down_wm == {**before, "degraded": True}
        assert await prompt(client) == {**prompted, "degraded": True}

        stats = await get_ok(client, "/v1/robots/a/stats")
        assert stats["working_memory"] == {
            "group": None,
            "tokens": 16,
            "max_tokens": 128000,
            "utilization": 0.01,
            "items": 2,
            "degraded": True,
        }
        ns_stats = await get_ok(client, "/v1/stats")
        assert ns_stats["versions"]["redis"] is None
        assert [(u["robot"], u["working_memory"]["degraded"]) for u in ns_stats["robots"]] == [
            ("a", True)
        ]
        # A read during the outage still reaches Postgres (and its membership's last access).
        clock.at(hours=3)
        assert (await get_ok(client, "/v1/robots/a/memories/low"))["key"] == "low"
        unavailable = {"admitted": False, "reason": "unavailable", "evicted": []}
        r = await client.put("/v1/robots/a/memories/during", json={"content": "zebra again"})
        assert (r.status_code, r.json()["working_memory"]) == (200, unavailable)
        r = await client.post(
            "/v1/robots/b/memories/batch",
            json={"memories": [{"key": "b1", "content": "x"}, {"key": "b2", "content": "y"}]},
        )
        assert r.status_code == 201
        assert [m["working_memory"] for m in r.json()["memories"]] == [unavailable] * 2

        # Redis comes back empty on the same port: the working set is rebuilt from Postgres.
        back = EmbeddedRedis(server.data_dir, port=server.port, persistent=False).start()
        try:
            after = await get_ok(client, "/v1/robots/a/working-memory")
            assert after["degraded"] is False
            expected = [dict(i) for i in before["items"]]
            expected[0]["last_access_at"] = "2031-05-06T11:00:00.123000Z"  # ms, as Redis
            assert [i["key"] for i in expected] == ["low", "high"]
            assert after["items"] == expected
            during = await get_ok(client, "/v1/robots/a/memories/during")
            assert during["content"] == "zebra again"
            assert (await get_ok(client, "/v1/robots/b/working-memory"))["items"] == []
            assert (await get_ok(client, "/v1/robots/a/stats"))["working_memory"][
                "degraded"
            ] is False
            assert (await add(client, "later", 3, 1))["admitted"] is True
        finally:
            back.stop()


async def test_removals_missed_while_redis_was_away_are_not_resurrected(
    own_db_factory, tmp_path
) -> None:
    # Redis with its data intact after an outage (a blip, not a restart): it still holds what
    # was forgotten and cleared meanwhile. The next request must rebuild from Postgres.
    server = EmbeddedRedis(tmp_path / "redis", persistent=True).start()
    try:
        async with app_on(own_db_factory, server) as client:
            for key in ("keep", "forget-me"):
                await add(client, key, 10, 5)
            await add(client, "other", 10, 5)
            r = await client.post(
                "/v1/robots/reader/recall", json={"query": "note", "strategy": "fulltext"}
            )
            assert sorted(r.json()["working_memory"]["loaded"]) == ["forget-me", "keep", "other"]

            server.stop()
            assert (await client.delete("/v1/robots/a/memories/forget-me")).status_code == 200
            assert (await client.delete("/v1/robots/reader/working-memory")).status_code == 200
            server.start()  # same port, same append-only file: the old data is back

            writer = await get_ok(client, "/v1/robots/a/working-memory")
            reader = await get_ok(client, "/v1/robots/reader/working-memory")
            assert ([i["key"] for i in writer["items"]], writer["degraded"]) == (
                ["keep", "other"],
                False,
            )
            assert (reader["items"], reader["tokens"]) == ([], 0)
    finally:
        server.stop()


async def write_old_layout(r: aioredis.Redis, ns: str, robot: str, items: list[dict]) -> None:
    """What the previous key layout held for a robot: ``htm:{ns/robot}:items`` (one JSON
    document per item), ``evict``, ``access`` and ``meta`` (an initialized robot)."""
    prefix = f"htm:{{{ns}/{robot}}}:"
    for it in items:
        member = f"{it['added_at']:020d}:{it['key']}"
        doc = {k: v for k, v in it.items() if k != "key"} | {"member": member}
        await r.hset(prefix + "items", it["key"], json.dumps(doc))
        await r.zadd(prefix + "evict", {member: it["importance"]})
        await r.zadd(prefix + "access", {it["key"]: it["last_access"]})
    tokens = sum(it["tokens"] for it in items)
    await r.hset(prefix + "meta", mapping={"tokens": tokens, "budget": 40, "seq": 7, "gen": 1})


@pytest.mark.single_redis("FLUSHALL of its own server")
async def test_a_robot_held_only_in_the_old_key_layout_is_rebuilt_from_postgres(
    own_db_factory, redis_server_factory
) -> None:
    # After an upgrade Redis may still hold what the previous release wrote: keys under the old
    # prefix (`htm:{ns/robot}:…`, an item as one JSON document). They are never read: the robot
    # is not initialized under the current keys, so it is rebuilt from Postgres exactly.
    server = redis_server_factory.start()
    async with app_on(own_db_factory, server) as client:
        clock, ns = client.clock, client.headers["X-Namespace"]
        assert (await client.put("/v1/robots/a", json={"working_memory_budget": 40})).is_success
        for minute, (key, tokens, importance, word) in enumerate(
            [("a", 10, 2, "walrus"), ("b", 8, 5, "note"), ("c", 6, 1, "note")]
        ):
            clock.at(minutes=minute)
            await add(client, key, tokens, importance, word)
        clock.at(minutes=5)
        r = await client.post(
            "/v1/robots/a/recall", json={"query": "walrus", "strategy": "fulltext"}
        )
        assert r.json()["working_memory"]["loaded"] == ["a"]
        clock.at(minutes=6)
        assert (await client.get("/v1/robots/a/memories/b")).status_code == 200
        expected = [
            {
                "key": key,
                "content": text_of(tokens, word),
                "tokens": tokens,
                "importance": importance,
                "added_at": (T0 + timedelta(minutes=added)).isoformat().replace("+00:00", "Z"),
                "last_access_at": f"2031-05-06T08:{access:02d}:00.123000Z",  # ms, as Redis
                "from_recall": from_recall,
            }
            for key, tokens, importance, word, added, access, from_recall in [
                ("c", 6, 1.0, "note", 2, 2, False),
                ("a", 10, 2.0, "walrus", 0, 5, True),
                ("b", 8, 5.0, "note", 1, 6, False),
            ]
        ]
        assert (await get_ok(client, "/v1/robots/a/working-memory"))["items"] == expected
        contexts = {
            s: await get_ok(client, "/v1/robots/a/context", strategy=s)
            for s in ("recent", "important", "balanced")
        }

        # Redis now holds only the old layout, and there a different working set: a memory
        # Postgres never had, another content for `a`, no `b` or `c`.
        old = [
            {
                "key": "ghost",
                "content": "never in Postgres",
                "tokens": 3,
                "importance": 9.0,
                "added_at": 1,
                "last_access": 2,
                "from_recall": False,
                "id": 999_999,
            },
            {
                "key": "a",
                "content": "stale",
                "tokens": 1,
                "importance": 2.0,
                "added_at": 3,
                "last_access": 4,
                "from_recall": False,
                "id": 1,
            },
        ]
        await flushall(server)
        async with aioredis.from_url(server.url, decode_responses=True) as r:
            await write_old_layout(r, ns, "a", old)
            old_keys = sorted(await r.keys("*"))
            old_dump = {k: await r.dump(k) for k in old_keys}

            rebuilt = await get_ok(client, "/v1/robots/a/working-memory")
            assert (rebuilt["items"], rebuilt["tokens"], rebuilt["degraded"]) == (
                expected,
                24,
                False,
            )
            for strategy, ctx in contexts.items():
                assert await get_ok(client, "/v1/robots/a/context", strategy=strategy) == ctx
            # The old keys are left as they were: neither read nor written.
            assert {k: await r.dump(k) for k in old_keys} == old_dump
            current = set(await r.keys("*")) - set(old_keys)
            keys = robot_keys(ns, "a")
            # no recall load is pending, no state key was written
            assert current == set(keys) - {keys.pending, keys.state}
