"""200 concurrent place() calls on one robot: the budget holds at every observation, and the
result equals the reference model fed the same calls in commit (seq) order."""

from __future__ import annotations

import asyncio
import random
import threading

import redis.asyncio as aioredis

from app.working_memory.items import WMItem
from app.working_memory.store import WorkingMemoryStore
from tests.cluster import connect, is_cluster
from tests.working_memory.helpers import NS, meta
from tests.working_memory.reference import ReferenceModel

BUDGET = 500
CALLS = 200


def random_calls(rng: random.Random) -> list[list[WMItem]]:
    """Single adds and recall-like batches over 60 keys, so calls overlap and re-place."""
    calls = []
    for n in range(CALLS):
        batch = []
        for j in range(rng.choice([1, 1, 2, 3])):
            key = f"m{rng.randrange(60)}"
            tokens = BUDGET + 1 if rng.random() < 0.03 else rng.randint(5, 120)
            batch.append(
                WMItem(
                    key=key,
                    content=f"{key} from call {n}",
                    tokens=tokens,
                    importance=rng.choice([0.5, 1.0, 1.0, 2.0, 5.0, 7.25, 10.0]),
                    added_at_us=1_700_000_000_000_000 + n * 1000 + j,
                    last_access_ms=1_700_000_000_000 + n,
                    from_recall=j > 0,
                )
            )
        calls.append(batch)
    return calls


class Observer(threading.Thread):
    """Polls usage and snapshot from its own thread, event loop and connection, so it really
    runs in parallel with the writers instead of taking turns with them on one loop."""

    def __init__(self, redis_url: str, robot: str) -> None:
        super().__init__(daemon=True)
        self.redis_url, self.robot = redis_url, robot
        self.stop = threading.Event()
        self.seqs: list[int] = []  # seq at each observation
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self.poll())
        except BaseException as e:  # reported by the test thread
            self.failure = e

    async def poll(self) -> None:
        client = connect(self.redis_url)
        store = WorkingMemoryStore(client)
        try:
            while not self.stop.is_set():
                tokens, _ = await store.usage(NS, self.robot)
                items, snap_tokens = await store.snapshot(NS, self.robot)
                assert tokens <= BUDGET, f"usage saw {tokens} tokens"
                assert snap_tokens <= BUDGET, f"snapshot saw {snap_tokens} tokens"
                assert sum(i.tokens for i in items) == snap_tokens
                self.seqs.append(int((await meta(client, NS, self.robot))["seq"]))
        finally:
            await client.aclose()


async def test_concurrent_places_never_exceed_budget_and_match_commit_order(redis_url, robot):
    pool = aioredis.BlockingConnectionPool.from_url(
        redis_url, decode_responses=True, max_connections=16
    )
    # On a cluster (HTM_TEST_REDIS_CLUSTER=1), a cluster client: its own pool per node, which
    # raises instead of blocking when full, so one connection per call.
    if is_cluster(redis_url):
        client = connect(redis_url, max_connections=CALLS)
    else:
        client = aioredis.Redis(connection_pool=pool)
    store = WorkingMemoryStore(client)
    calls = random_calls(random.Random(20240601))
    init = await store.load(NS, robot, [], BUDGET)

    observer = Observer(redis_url, robot)
    observer.start()
    results = await asyncio.gather(*(store.place(NS, robot, c, BUDGET) for c in calls))
    observer.stop.set()
    await asyncio.to_thread(observer.join, 10)
    if observer.failure:
        raise observer.failure
    mid_run = [s for s in observer.seqs if init.seq < s < init.seq + CALLS]
    assert len(mid_run) >= 3, f"observer saw too little of the run: {observer.seqs}"

    seqs = sorted(r.seq for r in results)
    assert seqs == list(range(init.seq + 1, init.seq + 1 + CALLS))

    model = ReferenceModel()
    model.load([], BUDGET, init.seq)
    for res, call in sorted(zip(results, calls, strict=True), key=lambda p: p[0].seq):
        assert (res.admitted, res.rejected, res.evicted) == model.place(call, BUDGET)
        assert res.tokens == model.tokens <= BUDGET
    items, tokens = await store.snapshot(NS, robot)
    assert items == model.eviction_order()
    assert tokens == model.tokens
    await client.aclose()
    await pool.disconnect()
