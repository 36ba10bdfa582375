"""200 concurrent adds to one robot over HTTP (issue 4, invariant 3): an observer reading
Redis while they run never sees the budget exceeded, and afterwards Redis's working set is
exactly the Postgres membership."""

from __future__ import annotations

import asyncio
import random
import uuid

from sqlalchemy import text

from app.working_memory.store import robot_keys
from tests.cluster import connect

BUDGET = 60
ADDS = 200


async def test_concurrent_adds_never_exceed_the_budget_and_postgres_agrees(
    app_factory, redis_url
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    rng = random.Random(4)
    # 1 to 12 words: 1 to 12 tokens each; a handful of distinct importances.
    bodies = [
        {
            "key": f"k{i:03d}",
            "content": " ".join(["apple"] * rng.randint(1, 12)),
            "importance": rng.choice([0, 1, 1, 2, 5]),
        }
        for i in range(ADDS)
    ]
    async with (
        app_factory(db_pool_size=10) as client,
        connect(redis_url) as observer_redis,
    ):
        client.headers["X-Namespace"] = ns
        r = await client.put("/v1/robots/busy", json={"working_memory_budget": BUDGET})
        assert r.status_code == 200
        meta_key = robot_keys(ns, "busy").meta
        seen: list[int] = []
        done = asyncio.Event()

        async def observe() -> None:
            while not done.is_set():
                tokens = await observer_redis.hget(meta_key, "tokens")
                if tokens is not None:
                    seen.append(int(tokens))
                await asyncio.sleep(0)

        async def add(body: dict) -> dict:
            r = await client.post("/v1/robots/busy/memories", json=body)
            assert r.status_code == 201, r.text
            return r.json()["working_memory"]

        watcher = asyncio.create_task(observe())
        try:
            outcomes = await asyncio.gather(*(add(b) for b in bodies))
        finally:
            done.set()
            await watcher

        assert len(seen) > 50, "the observer barely ran"
        assert max(seen) <= BUDGET
        assert all(o["reason"] in ("admitted", "evicted") for o in outcomes)
        evicted = [k for o in outcomes for k in o["evicted"]]
        assert len(evicted) == len(set(evicted)) > 100  # each key leaves at most once

        wm = (await client.get("/v1/robots/busy/working-memory")).json()
        redis_set = {i["key"] for i in wm["items"]}
        assert wm["tokens"] == sum(i["tokens"] for i in wm["items"]) <= BUDGET
        assert redis_set == {b["key"] for b in bodies} - set(evicted)

        async with client.app.state.components.sessionmaker() as s:
            rows = (
                await s.execute(
                    text("""
                    SELECT k.key, w.in_working_memory FROM working_memory_item w
                    JOIN robot r ON r.id = w.robot_id JOIN namespace n ON n.id = r.namespace_id
                    JOIN memory_key k ON k.memory_id = w.memory_id
                    WHERE n.name = :ns AND r.name = 'busy'"""),
                    {"ns": ns},
                )
            ).all()
            memories = (
                await s.execute(
                    text("""SELECT count(*) FROM memory m JOIN namespace n
                            ON n.id = m.namespace_id WHERE n.name = :ns"""),
                    {"ns": ns},
                )
            ).scalar_one()
        assert memories == ADDS  # eviction never deletes long-term memory
        assert {k for k, member in rows if member} == redis_set
        assert {k for k, member in rows if not member} == set(evicted)
