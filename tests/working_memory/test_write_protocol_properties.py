"""Random interleavings of every working-memory change, over HTTP, concurrently.

Hypothesis draws a batch of adds, PUTs, supersedes (an add replacing a key: `supersedes`),
forgets (soft and hard), restores, recalls (once, or twice in a row: the second refreshes
hits already in place), retrieves, clears and budget changes from three robots on a handful
of keys; the batch runs all at once against the real app, PostgreSQL and Redis, while an
observer samples every robot's token total against the budget of its last script. After
the batch has quiesced:

- no request answered 5xx, and each answered one of its operation's statuses;
- every robot's Redis working memory equals its Postgres mirror, holds only the current
  content of live memories, is within budget, and nothing is left for repair (audit);
- each key holds the content of one of the writes that targeted it;
- no working memory holds a superseded memory.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.working_memory.store import robot_keys
from tests.cluster import connect
from tests.working_memory.tiers import disagreements

ROBOTS = ["a", "b", "c"]
KEYS = ["k1", "k2", "k3", "k4"]
ALLOWED = {
    "add": {201, 409},
    # 404: the key is gone or never was; 409: superseded already, or the new key is taken
    "supersede": {201, 404, 409},
    "put": {200, 201},
    "forget": {200, 404},
    "forget_hard": {200, 404},
    "restore": {200, 404},
    "recall": {200},
    "recall_twice": {200},
    "get": {200, 404},
    "clear": {200},
    "budget": {200},
}

robots = st.sampled_from(ROBOTS)
keys = st.sampled_from(KEYS)
writes = st.tuples(robots, keys, st.integers(0, 6), st.sampled_from([0.0, 1.0, 5.0]))
ops = st.one_of(
    st.tuples(st.just("add"), writes),
    st.tuples(st.just("put"), writes),
    st.tuples(st.just("supersede"), st.tuples(robots, keys, st.integers(0, 2))),
    st.tuples(st.just("forget"), st.tuples(robots, keys)),
    st.tuples(st.just("forget_hard"), st.tuples(robots, keys)),
    st.tuples(st.just("restore"), st.tuples(robots, keys)),
    st.tuples(st.just("recall"), st.tuples(robots)),
    # The same question twice in a row: the second finds its hits in place and takes the
    # refresh path (WriteProtocol._refresh: accesses only, no lock) amid the other changes.
    st.tuples(st.just("recall_twice"), st.tuples(robots)),
    st.tuples(st.just("get"), st.tuples(robots, keys)),
    st.tuples(st.just("clear"), st.tuples(robots)),
    st.tuples(st.just("budget"), st.tuples(robots, st.sampled_from([12, 30, 200]))),
)


def content(key: str, n: int) -> str:
    # 3 to 21 tokens; every content matches the recall query "note".
    return f"note {key} " + "walrus " * (3 * n)


async def run(client: Any, op: tuple[str, tuple]) -> int:
    name, args = op
    if name in ("add", "put"):
        robot, key, n, importance = args
        body = {"content": content(key, n), "importance": importance}
        if name == "add":
            r = await client.post(f"/v1/robots/{robot}/memories", json={**body, "key": key})
        else:
            r = await client.put(f"/v1/robots/{robot}/memories/{key}", json=body)
    elif name == "supersede":
        robot, key, n = args
        body = {"key": f"{key}@{n}", "content": content(key, n), "supersedes": [key]}
        r = await client.post(f"/v1/robots/{robot}/memories", json=body)
    elif name in ("forget", "forget_hard"):
        robot, key = args
        params = {"hard": "true", "confirm": key} if name == "forget_hard" else {}
        r = await client.delete(f"/v1/robots/{robot}/memories/{key}", params=params)
    elif name == "restore":
        robot, key = args
        r = await client.post(f"/v1/robots/{robot}/memories/{key}/restore")
    elif name in ("recall", "recall_twice"):
        (robot,) = args
        for _ in range(2 if name == "recall_twice" else 1):
            r = await client.post(
                f"/v1/robots/{robot}/recall", json={"query": "note", "strategy": "fulltext"}
            )
            assert r.status_code in ALLOWED[name], (op, r.status_code, r.text)
    elif name == "get":
        robot, key = args
        r = await client.get(f"/v1/robots/{robot}/memories/{key}")
    elif name == "clear":
        (robot,) = args
        await client.put(f"/v1/robots/{robot}", json={})  # clear needs a registered robot
        r = await client.delete(f"/v1/robots/{robot}/working-memory")
    else:
        robot, budget = args
        r = await client.put(f"/v1/robots/{robot}", json={"working_memory_budget": budget})
    assert r.status_code in ALLOWED[name], (op, r.status_code, r.text)
    return r.status_code


@pytest.fixture
async def client(app_factory):
    async with app_factory(db_pool_size=8) as c:
        yield c


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(ops, min_size=5, max_size=40))
async def test_random_concurrent_changes_leave_the_tiers_in_agreement(client, batch) -> None:
    ns = f"p-{uuid.uuid4().hex[:12]}"
    client.headers["X-Namespace"] = ns
    redis_url = client.app.state.components.settings.redis_url
    over: list[tuple[str, int, int]] = []
    done = asyncio.Event()

    async def observe(r: aioredis.Redis) -> int:
        samples = 0
        while not done.is_set():
            for robot in ROBOTS:
                tokens, budget = await r.hmget(robot_keys(ns, robot).meta, "tokens", "budget")
                if tokens is not None and budget is not None:
                    samples += 1
                    if int(tokens) > int(budget):
                        over.append((robot, int(tokens), int(budget)))
            await asyncio.sleep(0)
        return samples

    async with connect(redis_url) as r:
        watcher = asyncio.create_task(observe(r))
        try:
            await asyncio.gather(*(run(client, op) for op in batch))
        finally:
            done.set()
            await watcher
    assert over == []

    used = sorted({args[0] for _, args in batch})
    registered = {x["name"] for x in (await client.get("/v1/robots")).json()}
    assert await disagreements(client, [r for r in used if r in registered]) == {}
    # Each stored key holds what one of the writes to it wrote.
    written = {
        (args[1], content(args[1], args[2])) for name, args in batch if name in ("add", "put")
    } | {(f"{a[1]}@{a[2]}", content(a[1], a[2])) for name, a in batch if name == "supersede"}
    listed = await client.get(
        "/v1/robots/a/memories", params={"include_deleted": "true", "include": "superseded"}
    )
    for m in listed.json()["items"]:
        assert (m["key"], m["content"]) in written
    ended = {m["key"] for m in listed.json()["items"] if m["superseded_by"]}
    for robot in used:
        if robot in registered:
            held = (await client.get(f"/v1/robots/{robot}/working-memory")).json()["items"]
            assert ended.isdisjoint(i["key"] for i in held), (robot, ended, held)
