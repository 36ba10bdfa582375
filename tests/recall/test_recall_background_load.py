"""A recall's load into working memory off the request's path (issue 46, item 1;
app/working_memory/loads.py): the default recall answers `pending` before its hits are
placed; a read of that working memory after the answer sees them, in this process (it waits
for the loads taken before it) and in another (the read scripts wait while the load is
marked pending in Redis); concurrent and coalesced loads leave what the same recalls one
after another leave; Redis losing its data loses nothing acknowledged; shutdown applies the
loads still queued."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from sqlalchemy import text

from app.embedded import EmbeddedRedis
from tests.working_memory.tiers import (
    disagreements,
    robot_id,
    robot_locked,
    scalar,
    wait_for_lock_waiters,
)

WORDS = ["walrus", "otter", "heron", "badger", "lynx", "marten"]


@asynccontextmanager
async def background_app(app_factory: Any, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An app with the default recall load (`background`), which the suite sets to `wait`."""
    async with app_factory(
        recall_load="background", working_memory_repair_interval_s=3600, **settings
    ) as client:
        client.headers["X-Namespace"] = settings.get("namespace") or f"t-{uuid.uuid4().hex[:12]}"
        yield client


@pytest.fixture
async def client(app_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with background_app(app_factory) as c:
        yield c


async def add(client: httpx.AsyncClient, robot: str, key: str, content: str, **extra: Any) -> None:
    r = await client.post(
        f"/v1/robots/{robot}/memories", json={"key": key, "content": content, **extra}
    )
    assert r.status_code == 201, r.text


async def seed(client: httpx.AsyncClient, writer: str = "w") -> None:
    """Two memories per word, written by another robot (its working memory, not theirs)."""
    for word in WORDS:
        for n in (1, 2):
            await add(client, writer, f"{word}-{n}", f"the {word} note number {n} " + "x " * n)


async def recall(client: httpx.AsyncClient, robot: str, query: str, **extra: Any) -> dict:
    body = {"query": query, "strategy": "fulltext", "limit": 10, "min_score": 0, **extra}
    r = await client.post(f"/v1/robots/{robot}/recall", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def held(client: httpx.AsyncClient, robot: str) -> list[tuple[str, int, bool]]:
    """The working memory as GET …/working-memory serves it, in eviction order."""
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    assert r.json()["degraded"] is False
    return [(i["key"], i["tokens"], i["from_recall"]) for i in r.json()["items"]]


async def context_keys(client: httpx.AsyncClient, robot: str) -> set[str]:
    r = await client.get(f"/v1/robots/{robot}/context", params={"strategy": "recent"})
    assert r.status_code == 200, r.text
    return {i["key"] for i in r.json()["items"]}


async def mirror(client: httpx.AsyncClient, robot: str) -> set[str]:
    """The keys the robot's PostgreSQL mirror lists."""
    rid = await robot_id(client, robot)
    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        rows = await s.execute(
            text("""SELECT k.key FROM working_memory_item w
                    JOIN memory_key k ON k.memory_id = w.memory_id
                    WHERE w.robot_id = :r AND w.in_working_memory"""),
            {"r": rid},
        )
        return {r.key for r in rows}


async def test_the_answer_says_pending_and_a_context_read_after_it_sees_the_hits(client):
    await seed(client)
    answered = await recall(client, "a", "walrus")
    hits = [h["key"] for h in answered["hits"]]
    assert sorted(hits) == ["walrus-1", "walrus-2"]
    assert answered["working_memory"] == {
        "loaded": [],
        "evicted": [],
        "not_admitted": [],
        "pending": hits,
        "reason": "pending",
    }
    assert await context_keys(client, "a") == {"walrus-1", "walrus-2"}
    assert [k for k, _, _ in await held(client, "a")] == hits  # placed in the hits' order
    assert await disagreements(client, ["a"]) == {}


async def test_the_answer_does_not_wait_for_the_load_and_a_read_waits_for_it(client):
    await seed(client)
    await recall(client, "a", "otter")  # registers a; its hits are loaded
    assert await context_keys(client, "a") == {"otter-1", "otter-2"}
    loads = client.app.state.components.recall_loads  # type: ignore[attr-defined]
    async with robot_locked(client, "a"):
        # The placement waits for the robot's lock; the recall answers all the same.
        answered = await asyncio.wait_for(recall(client, "a", "heron"), 10)
        assert answered["working_memory"]["reason"] == "pending"
        await wait_for_lock_waiters(client)
        assert loads.queued == 1
        read = asyncio.create_task(context_keys(client, "a"))
        working = asyncio.create_task(held(client, "a"))
        await asyncio.sleep(0.3)
        assert not read.done() and not working.done()
    assert await read == {"otter-1", "otter-2", "heron-1", "heron-2"}
    assert {k for k, _, _ in await working} == {"otter-1", "otter-2", "heron-1", "heron-2"}
    assert loads.queued == 0
    assert await mirror(client, "a") == {"otter-1", "otter-2", "heron-1", "heron-2"}


async def test_a_read_in_another_process_waits_for_the_pending_load(app_factory):
    """Two app instances on one database and one Redis, as two service processes: the
    recall answers in the first, the read goes to the second while the load is pending."""
    async with background_app(app_factory) as one:
        ns = one.headers["X-Namespace"]
        async with background_app(app_factory, namespace=ns) as two:
            two.headers["X-Namespace"] = ns
            await seed(one)
            await recall(one, "a", "badger")
            assert await context_keys(two, "a") == {"badger-1", "badger-2"}
            store = two.app.state.components.working_memory  # type: ignore[attr-defined]
            async with robot_locked(one, "a"):
                answered = await asyncio.wait_for(recall(one, "a", "lynx"), 10)
                assert sorted(answered["working_memory"]["pending"]) == ["lynx-1", "lynx-2"]
                await wait_for_lock_waiters(one)
                waits = store.pending_waits
                # The store's read alone (no PostgreSQL): it polls the mark.
                direct = asyncio.create_task(store.snapshot(ns, "a"))
                read = asyncio.create_task(context_keys(two, "a"))
                prompt = asyncio.create_task(
                    two.post(
                        "/v1/robots/a/prompt",
                        json={"input": "What now?", "context_window": 4000, "recall": None},
                    )
                )
                await asyncio.sleep(0.3)
                assert not read.done() and not prompt.done() and not direct.done()
                assert store.pending_waits > waits  # the second process polls the mark
            want = {"badger-1", "badger-2", "lynx-1", "lynx-2"}
            assert {i.key for i in (await direct)[0]} == want
            assert await read == want
            prompted = await prompt
            assert prompted.status_code == 200, prompted.text
            manifest = prompted.json()["manifest"]
            assert {e["key"] for e in manifest if e["source"] == "working_memory"} == want


async def test_a_mark_left_by_a_dead_process_lapses_at_its_deadline(app_factory):
    async with background_app(app_factory) as client:
        await seed(client)
        await recall(client, "a", "marten")
        store = client.app.state.components.working_memory  # type: ignore[attr-defined]
        ns = client.headers["X-Namespace"]
        # A process took a load for `a`, marked it, and died before applying it.
        await store.mark_pending(ns, "a", "dead-process-load", 400)
        t0 = asyncio.get_running_loop().time()
        assert await context_keys(client, "a") == {"marten-1", "marten-2"}
        waited = asyncio.get_running_loop().time() - t0
        assert 0.3 <= waited < 5, waited


@pytest.mark.parametrize("budget", [None, 40])
async def test_coalesced_loads_leave_what_the_same_recalls_one_after_another_leave(client, budget):
    """Recalls answered while the robot's lock is held queue their loads, applied as one
    placement when it is released; robot `s` runs the same recalls each waiting for its load
    (the old synchronous path). With a budget of 40 tokens, loads evict."""
    await seed(client)
    queries = ["walrus", "otter", "walrus heron", "badger", "otter lynx", "walrus"]
    for robot in ("c", "s"):
        body = {"working_memory_budget": budget} if budget else {}
        assert (await client.put(f"/v1/robots/{robot}", json=body)).status_code in (200, 201)
    await recall(client, "c", "marten")  # places something first, as for s
    await recall(client, "s", "marten", wait_for_working_memory=True)
    await held(client, "c")  # waits for c's load
    loads = client.app.state.components.recall_loads  # type: ignore[attr-defined]
    applied = loads.applied
    async with robot_locked(client, "c"):
        for q in queries:
            assert (await recall(client, "c", q))["working_memory"]["reason"] == "pending"
        await wait_for_lock_waiters(client)
    for q in queries:
        answered = await recall(client, "s", q, wait_for_working_memory=True)
        assert answered["working_memory"]["reason"] == "loaded"
    coalesced = await held(client, "c")
    assert coalesced == await held(client, "s")
    # The first load taken (it waited for the lock), then the others as one; or all as one.
    assert loads.applied - applied in (1, 2)
    if budget:
        assert sum(t for _, t, _ in coalesced) <= budget
        assert len(coalesced) < 12
    assert await disagreements(client, ["c", "s"]) == {}


async def test_concurrent_recalls_end_with_the_working_memory_of_the_sequential_ones(client):
    await seed(client)
    queries = [f"{a} {b}" for a, b in zip(WORDS, WORDS[1:] + WORDS[:1], strict=True)] * 3
    answers = await asyncio.gather(*(recall(client, "c", q) for q in queries))
    assert {a["working_memory"]["reason"] for a in answers} == {"pending"}
    for q in queries:
        await recall(client, "s", q, wait_for_working_memory=True)
    concurrent = await held(client, "c")
    assert sorted(concurrent) == sorted(await held(client, "s"))
    assert {k for k, _, _ in concurrent} == {f"{w}-{n}" for w in WORDS for n in (1, 2)}
    assert await disagreements(client, ["c", "s"]) == {}


async def test_waiting_for_working_memory_answers_what_the_load_did(client):
    await seed(client)
    assert (await client.put("/v1/robots/a", json={"working_memory_budget": 12})).is_success
    answered = await recall(client, "a", "walrus otter", wait_for_working_memory=True)
    wm = answered["working_memory"]
    assert wm["reason"] == "loaded" and wm["pending"] == []
    assert set(wm["loaded"]) | set(wm["evicted"]) | set(wm["not_admitted"]) >= {
        "walrus-1",
        "otter-1",
    }
    assert [k for k, _, _ in await held(client, "a")] == wm["loaded"]


async def test_a_clear_after_the_answer_comes_after_the_load(client):
    """A change of the working memory after the recall's answer (here: clear) is applied
    after the load: the working memory ends empty, as if the load had been waited for."""
    await seed(client)
    await recall(client, "a", "heron")
    async with robot_locked(client, "a"):
        await recall(client, "a", "walrus")
        await wait_for_lock_waiters(client)
        cleared = asyncio.create_task(client.delete("/v1/robots/a/working-memory"))
        await asyncio.sleep(0.2)
        assert not cleared.done()
    assert (await cleared).status_code == 200
    assert await held(client, "a") == []
    assert await mirror(client, "a") == set()


async def flushall(server: EmbeddedRedis) -> None:
    async with aioredis.from_url(server.url) as r:
        await r.flushall()


@pytest.fixture
async def own_db_factory(app_factory, database_factory):  # type: ignore[no-untyped-def]
    """Apps on a database of their own: no other test's repair worker rebuilds these robots."""
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    return functools.partial(app_factory, database_url=url)


@pytest.mark.single_redis("FLUSHALL of its own server")
async def test_redis_losing_its_data_loses_no_load_and_nothing_acknowledged(
    own_db_factory, redis_server_factory
):
    server = redis_server_factory.start()
    async with background_app(own_db_factory, redis_url=server.url, redis_retry_after_s=0) as c:
        await seed(c)  # acknowledged: each add placed in w's working memory
        writer = await held(c, "w")
        await recall(c, "a", "walrus")
        assert await context_keys(c, "a") == {"walrus-1", "walrus-2"}
        # Lost after the load was applied: rebuilt from the mirror.
        await flushall(server)
        assert await context_keys(c, "a") == {"walrus-1", "walrus-2"}
        # Lost while a load is pending (its mark with it): the placement finds nothing,
        # rebuilds from the mirror, then places.
        async with robot_locked(c, "a"):
            await recall(c, "a", "otter")
            await wait_for_lock_waiters(c)
            await flushall(server)
        assert await context_keys(c, "a") == {"walrus-1", "walrus-2", "otter-1", "otter-2"}
        assert await held(c, "w") == writer
        assert await disagreements(c, ["a", "w"]) == {}


async def test_shutdown_applies_the_loads_still_queued(own_db_factory):
    async with background_app(own_db_factory) as c:
        await seed(c)
        await recall(c, "a", "lynx")
        await context_keys(c, "a")
        locked = robot_locked(c, "a")
        await locked.__aenter__()
        await recall(c, "a", "badger")
        await wait_for_lock_waiters(c)

        async def release_later() -> None:
            await asyncio.sleep(0.5)
            await locked.__aexit__(None, None, None)

        release = asyncio.create_task(release_later())
        ns = c.headers["X-Namespace"]
        rid = await robot_id(c, "a")
        t0 = asyncio.get_running_loop().time()
    # The app's shutdown waited for the load the lock held back.
    assert asyncio.get_running_loop().time() - t0 >= 0.4
    await release
    async with background_app(own_db_factory, namespace=ns) as again:
        again.headers["X-Namespace"] = ns
        held_ids = await scalar(
            again,
            "SELECT count(*) FROM working_memory_item WHERE robot_id = :r AND in_working_memory",
            r=rid,
        )
        assert held_ids == 4
        assert await context_keys(again, "a") == {"lynx-1", "lynx-2", "badger-1", "badger-2"}
