"""Read replicas with read-your-writes, against a real streaming replica (conftest.py): reads
routed to the replica, a consistency token honoured through a lagging (paused) replica, a
replica stopped mid-load costing no 5xx and no acknowledged write, a malformed token refused.

Replay is paused with `pg_wal_replay_pause()`: the replica then stays behind every write
made meanwhile, so which server answered a read shows in what it sees."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from typing import Any

import httpx

from bench.replica_pair import Pair

ROBOT = "r1"
HEADER = "HTM-Consistency-Token"
TOKEN = re.compile(r"^[0-9A-F]{1,8}/[0-9A-F]{1,8}$")


async def add(client: httpx.AsyncClient, key: str) -> str:
    r = await client.post(
        f"/v1/robots/{ROBOT}/memories", json={"key": key, "content": f"zebras note {key}"}
    )
    assert r.status_code == 201, r.text
    token = r.headers[HEADER]
    assert TOKEN.match(token), token
    return token


def sent(token: str | None) -> dict[str, str]:
    return {HEADER: token} if token is not None else {}


async def listed(client: httpx.AsyncClient, token: str | None = None) -> set[str]:
    r = await client.get(f"/v1/robots/{ROBOT}/memories?limit=200", headers=sent(token))
    assert r.status_code == 200, r.text
    assert HEADER not in r.headers  # a read carries no token
    return {m["key"] for m in r.json()["items"]}


async def recalled(client: httpx.AsyncClient, token: str | None = None) -> set[str]:
    r = await client.post(
        f"/v1/robots/{ROBOT}/recall",
        json={"query": "zebras", "strategy": "fulltext", "limit": 100},
        headers=sent(token),
    )
    assert r.status_code == 200, r.text
    return {h["key"] for h in r.json()["hits"]}


async def retrieved(client: httpx.AsyncClient, key: str, token: str | None = None) -> int:
    """A retrieve that touches nothing (`as_of`: a version, no access recorded)."""
    r = await client.get(
        f"/v1/robots/{ROBOT}/memories/{key}?as_of=2100-01-01T00:00:00Z", headers=sent(token)
    )
    assert r.status_code in (200, 404), r.text
    return r.status_code


async def counted(client: httpx.AsyncClient, token: str | None = None) -> int:
    r = await client.get("/v1/stats", headers=sent(token))
    assert r.status_code == 200, r.text
    return int(r.json()["memories"])


def served(client: httpx.AsyncClient) -> Counter[str]:
    return Counter(client.replicas.served)  # type: ignore[attr-defined]


async def paused(pair: Pair) -> None:
    await pair.replica.sql("SELECT pg_wal_replay_pause()")


async def resumed(pair: Pair) -> None:
    await pair.replica.sql("SELECT pg_wal_replay_resume()")


async def test_reads_go_to_the_replica_and_a_token_reads_its_write_from_the_primary_after_the_wait(
    replica_app: Any, pair: Pair
) -> None:
    async with replica_app(replica_wait_s=0.5) as client:
        await add(client, "before")
        await pair.caught_up()
        await paused(pair)
        try:
            token = await add(client, "after")
            start = served(client)
            # Without the token: the replica, which has not replayed the write.
            assert await listed(client) == {"before"}
            assert await recalled(client) == {"before"}
            assert await retrieved(client, "after") == 404
            assert await counted(client) == 1
            assert served(client) - start == Counter({"replica": 4})
            # With it: the replica never gets there (paused), so after the wait, the primary.
            for read, seen in [
                (listed, {"before", "after"}),
                (recalled, {"before", "after"}),
                (counted, 2),
            ]:
                began = time.monotonic()
                assert await read(client, token) == seen
                assert time.monotonic() - began >= 0.5
            assert await retrieved(client, "after", token) == 200
            assert served(client) - start == Counter({"replica": 4, "primary: token": 4})
        finally:
            await resumed(pair)
        # Replayed now: the token's read is the replica's again, at once.
        await pair.caught_up()
        before = served(client)
        assert await listed(client, token) == {"before", "after"}
        assert served(client) - before == Counter({"replica": 1})
        metrics = (await client.get("/metrics")).text
        assert 'htm_replica_reads_total{served="replica"} 5.0' in metrics
        assert 'htm_replica_reads_total{served="primary: token"} 4.0' in metrics
        assert re.search(r'htm_replica_up\{replica="127.0.0.1:\d+/htm"\} 1.0', metrics)


async def test_read_your_writes_holds_for_every_write_through_a_lagging_replica(
    replica_app: Any, pair: Pair
) -> None:
    async with replica_app(replica_wait_s=0.2) as client:
        await paused(pair)
        try:
            written: set[str] = set()
            for i in range(6):
                key = f"k{i}"
                token = await add(client, key)
                written.add(key)
                if i % 3 == 2:  # a forget is a write too
                    r = await client.delete(f"/v1/robots/{ROBOT}/memories/k{i - 1}")
                    assert r.status_code == 200, r.text
                    token = r.headers[HEADER]
                    written.discard(f"k{i - 1}")
                assert await listed(client, token) == written
                assert await recalled(client, token) == written
                assert await listed(client) == set()  # the paused replica: nothing yet
        finally:
            await resumed(pair)
    # Replay resumed: each write's token is honoured by the replica itself (a wait long
    # enough for a replica on a busy 2-core machine to replay it).
    async with replica_app(replica_wait_s=5.0) as client:
        start = served(client)
        for i in range(6, 10):
            token = await add(client, f"k{i}")
            written.add(f"k{i}")
            assert await listed(client, token) == written
        assert served(client) - start == Counter({"replica": 4})


async def test_a_replica_stopped_mid_load_costs_no_5xx_and_no_acknowledged_write(
    replica_app: Any, pair: Pair
) -> None:
    statuses: Counter[int] = Counter()
    acknowledged: list[str] = []
    tokens: list[str] = []
    stop = asyncio.Event()

    async def writer(client: httpx.AsyncClient, w: int) -> None:
        n = 0
        while not stop.is_set():
            key = f"w{w}-{n}"
            r = await client.post(
                f"/v1/robots/{ROBOT}/memories", json={"key": key, "content": f"zebras {key}"}
            )
            statuses[r.status_code] += 1
            if r.status_code == 201:
                acknowledged.append(key)
                tokens.append(r.headers[HEADER])
            n += 1

    async def reader(client: httpx.AsyncClient, seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            token = tokens[-1] if tokens and rng.random() < 0.5 else None
            if rng.random() < 0.5:
                r = await client.get(f"/v1/robots/{ROBOT}/memories", headers=sent(token))
            else:
                r = await client.post(
                    f"/v1/robots/{ROBOT}/recall",
                    json={"query": "zebras", "strategy": "fulltext", "limit": 10},
                    headers=sent(token),
                )
            statuses[r.status_code] += 1

    async with replica_app(replica_wait_s=0.2) as client:
        try:
            load = [
                *(asyncio.create_task(writer(client, w)) for w in range(2)),
                *(asyncio.create_task(reader(client, s)) for s in range(4)),
            ]
            await asyncio.sleep(1.5)
            before = served(client)
            await asyncio.to_thread(pair.replica.stop, "immediate")
            await asyncio.sleep(1.5)
            stop.set()
            await asyncio.gather(*load)
            after = served(client) - before
            # Reads ran on the replica before the stop, and the primary served after it.
            assert before["replica"] > 0
            assert after["primary: failed"] + after["primary: lagging"] > 0
            assert set(statuses) <= {200, 201}, statuses
            keys = set()
            cursor = None
            while True:  # every acknowledged write, read with the last token
                r = await client.get(
                    f"/v1/robots/{ROBOT}/memories?limit=200"
                    + (f"&cursor={cursor}" if cursor else ""),
                    headers=sent(tokens[-1]),
                )
                assert r.status_code == 200, r.text
                keys |= {m["key"] for m in r.json()["items"]}
                cursor = r.json()["next_cursor"]
                if cursor is None:
                    break
            assert keys == set(acknowledged)
            assert len(acknowledged) > 10
        finally:
            stop.set()
            if not (pair.replica.data / "postmaster.pid").exists():
                await asyncio.to_thread(pair.replica.start)
            await pair.caught_up()


async def test_a_malformed_token_is_a_422_that_writes_nothing(replica_app: Any) -> None:
    async with replica_app() as client:
        for bad in ["nonsense", "0/", "1/2/3", "G/1", "123456789/0"]:
            r = await client.post(
                f"/v1/robots/{ROBOT}/recall",
                json={"query": "zebras", "strategy": "fulltext"},
                headers={HEADER: bad},
            )
            assert r.status_code == 422, (bad, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            r = await client.get(f"/v1/robots/{ROBOT}/memories", headers={HEADER: bad})
            assert r.status_code == 422, (bad, r.text)
        # An empty token is no token (the spec says so): a read as any other.
        r = await client.get(f"/v1/robots/{ROBOT}/memories", headers={HEADER: ""})
        assert (r.status_code, r.json()["items"]) == (200, [])
        # Nothing written: the recall registered no robot and logged nothing.
        r = await client.get("/v1/robots")
        assert r.status_code == 200
        assert r.json() == []


async def test_without_replicas_writes_carry_no_token(replica_app: Any) -> None:
    async with replica_app(database_replica_urls=[]) as client:
        r = await client.post(f"/v1/robots/{ROBOT}/memories", json={"content": "zebras"})
        assert r.status_code == 201
        assert HEADER not in r.headers


async def test_a_replica_lagging_past_the_bound_is_skipped_until_it_catches_up(
    replica_app: Any, pair: Pair
) -> None:
    async with replica_app(replica_max_lag_s=0.3) as client:
        replicas = client.replicas  # type: ignore[attr-defined]
        await paused(pair)
        try:
            await add(client, "late")
            await asyncio.sleep(0.5)
            await replicas.check()  # measures more than 0.3 s of lag
            start = served(client)
            assert await listed(client) == {"late"}  # the primary's answer
            assert served(client) - start == Counter({"primary: lagging": 1})
        finally:
            await resumed(pair)
        await pair.caught_up()
        await replicas.check()
        start = served(client)
        assert await listed(client) == {"late"}
        assert served(client) - start == Counter({"replica": 1})
