"""GET /v1/robots/{robot}/working-memory/events over real HTTP: two stream clients see the
same changes with the same ids; a standby resumes with Last-Event-ID and takes over; a lost
position gets a snapshot; Redis down at connect is a 503."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest

PROBLEM = "application/problem+json"


class Events:
    """One SSE connection, read event by event."""

    def __init__(self, client: httpx.AsyncClient, robot: str, last_id: str | None = None):
        headers = {"Last-Event-ID": last_id} if last_id else {}
        self._cm = client.stream(
            "GET", f"/v1/robots/{robot}/working-memory/events", headers=headers
        )
        self.ids: list[str] = []

    async def __aenter__(self) -> Events:
        self.response = await self._cm.__aenter__()
        assert self.response.status_code == 200
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._lines = self.response.aiter_lines()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(*exc)

    async def next(self) -> tuple[str, dict]:
        event: dict[str, str] = {}
        async with asyncio.timeout(10):
            async for line in self._lines:
                if line.startswith(":"):
                    continue
                if not line:
                    if event:
                        break
                    continue
                name, _, value = line.partition(": ")
                event[name] = value
        self.ids.append(event["id"])
        return event["event"], json.loads(event["data"])

    async def take(self, n: int) -> list[tuple[str, str | None]]:
        got = []
        for _ in range(n):
            kind, data = await self.next()
            got.append((kind, data.get("key")))
        return got


@pytest.fixture
async def http(live_server_factory):
    url = live_server_factory()
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        yield client


async def add(http, robot: str, key: str, content: str, importance: float = 1) -> None:
    r = await http.post(
        f"/v1/robots/{robot}/memories",
        json={"key": key, "content": content, "importance": importance},
    )
    assert r.status_code == 201, r.text


async def test_two_followers_see_the_same_changes_and_a_standby_takes_over(http) -> None:
    r = await http.put("/v1/groups/desk", json={"members": ["active", "standby"]})
    assert r.status_code == 200
    await add(http, "active", "k0", "the first fact")
    async with Events(http, "standby") as s1, Events(http, "active") as s2:
        for follower in (s1, s2):
            kind, snap = await follower.next()
            assert kind == "snapshot"
            assert (snap["robot"], snap["group"]) == (
                (follower is s1 and "standby") or "active",
                "desk",
            )
            assert [(i["key"], i["content"]) for i in snap["items"]] == [("k0", "the first fact")]
        assert s1.ids == s2.ids

        await add(http, "active", "k1", "the second fact", importance=3)
        assert (await http.delete("/v1/robots/active/memories/k0")).status_code == 200
        expected = [("added", "k1"), ("removed", "k0")]
        assert await s1.take(2) == expected
        assert await s2.take(2) == expected
        assert s1.ids == s2.ids
        last_seen = s1.ids[-1]

    # The standby was away: it resumes exactly after the last event it saw.
    await add(http, "active", "k2", "the third fact")
    await add(http, "active", "k3", "the fourth fact")
    async with Events(http, "standby", last_id=last_seen) as s1:
        assert await s1.take(2) == [("added", "k2"), ("added", "k3")]
        # ... and takes over: its writes go to the same working memory
        await add(http, "standby", "k4", "written by the standby")
        kind, data = await s1.next()
        assert (kind, data["key"], data["content"]) == ("added", "k4", "written by the standby")
    ctx = (await http.get("/v1/robots/standby/context", params={"strategy": "important"})).json()
    assert [i["key"] for i in ctx["items"]] == ["k1", "k4", "k3", "k2"]  # ties: newest first


async def test_evictions_removals_and_clears_carry_each_change_s_seq(http) -> None:
    await http.put("/v1/robots/a", json={"working_memory_budget": 6})
    long = "seven eight nine ten eleven twelve thirteen"  # 7 tokens: more than the budget
    async with Events(http, "a") as s:
        assert (await s.next())[0] == "snapshot"
        await add(http, "a", "k1", "one two three", importance=1)
        await add(http, "a", "k2", "four five six", importance=2)
        await add(http, "a", "k3", "seven eight nine ten", importance=5)  # evicts both
        await add(http, "a", "k4", long)  # never held: no event
        r = await http.put("/v1/robots/a/memories/k3", json={"content": long, "importance": 5})
        assert r.json()["working_memory"]["reason"] == "too_large"
        await add(http, "a", "k5", "one")
        assert (await http.delete("/v1/robots/a/working-memory")).status_code == 200
        got = [await s.next() for _ in range(8)]
    assert [(k, d.get("key")) for k, d in got] == [
        ("added", "k1"),
        ("added", "k2"),
        ("evicted", "k1"),
        ("evicted", "k2"),
        ("added", "k3"),
        ("removed", "k3"),
        ("added", "k5"),
        ("cleared", None),
    ]
    s0 = got[0][1]["seq"]
    # one seq per change; k4's rejection changed nothing but still took one
    assert [d["seq"] - s0 for _, d in got] == [0, 1, 2, 2, 2, 4, 5, 6]
    assert got[7][1]["reason"] == "cleared"
    assert (got[0][1]["tokens"], got[0][1]["importance"], got[0][1]["content"]) == (
        3,
        1.0,
        "one two three",
    )


async def test_a_position_the_stream_no_longer_holds_gets_a_snapshot(http) -> None:
    await add(http, "a", "k1", "kept")
    for last_id in ("1-0", "not-an-id"):
        async with Events(http, "a", last_id=last_id) as s:
            kind, snap = await s.next()
            assert (kind, [i["key"] for i in snap["items"]]) == ("snapshot", ["k1"])


@pytest.mark.single_redis("stops its own server")
async def test_an_unknown_robot_is_404_and_redis_down_is_503(app_factory, redis_server_factory, ns):
    server = redis_server_factory.start()
    async with app_factory(redis_url=server.url, redis_retry_after_s=0) as client:
        client.headers["X-Namespace"] = ns
        r = await client.get("/v1/robots/nobody/working-memory/events")
        assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)
        await client.put("/v1/robots/a", json={})
        server.stop()
        r = await client.get("/v1/robots/a/working-memory/events")
        assert (r.status_code, r.headers["content-type"]) == (503, PROBLEM)


async def test_a_rebuild_is_announced_then_replayed(http, redis) -> None:
    from app.working_memory.store import robot_keys

    await add(http, "a", "k1", "one", importance=2)
    await add(http, "a", "k2", "two")
    async with Events(http, "a") as s:
        assert (await s.next())[0] == "snapshot"
        keys = robot_keys(http.headers["X-Namespace"], "a")
        await redis.delete(*[k for k in keys if k != keys.events])  # Redis lost the set
        r = await http.get("/v1/robots/a/working-memory")  # rebuilt from PostgreSQL
        assert [i["key"] for i in r.json()["items"]] == ["k2", "k1"]
        got = [await s.next() for _ in range(3)]
    assert [(k, d.get("key"), d.get("reason")) for k, d in got] == [
        ("cleared", None, "rebuilt"),
        ("added", "k1", None),  # in the order they were added
        ("added", "k2", None),
    ]
