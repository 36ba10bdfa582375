"""The same scripts, unchanged, on a real 3-master Redis Cluster: every robot's keys share one
slot, so each script runs on the node owning it."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from app.working_memory.store import RobotKeys, WorkingMemoryStore, robot_keys
from tests.cluster import CLUSTER
from tests.working_memory.helpers import NS, item
from tests.working_memory.reference import ReferenceModel


def robots_on_distinct_nodes(cluster) -> dict[str, str]:
    """One robot name per master: node name -> robot."""
    found: dict[str, str] = {}
    for i in range(10_000):
        name = f"robot-{i}"
        node = cluster.get_node_from_key(robot_keys(NS, name).meta)
        found.setdefault(node.name, name)
        if len(found) == 3:
            return found
    raise AssertionError(f"robots landed on only {len(found)} nodes")


async def test_scripts_run_unchanged_on_redis_cluster(redis_cluster):
    store = WorkingMemoryStore(redis_cluster)
    assert (await store.ping()).split(".")[0].isdigit()
    robots = robots_on_distinct_nodes(redis_cluster)
    budget = 40

    for node_name, robot in robots.items():
        model = ReferenceModel()
        first = [item("a", added=1), item("b", importance=3, added=2)]
        res = await store.load(NS, robot, first, budget)
        assert (res.admitted, res.rejected, res.evicted) == model.load(first, budget, res.seq)

        batch = [item("c", 15, 2.0, added=3), item("d", 15, 0.5, added=4), item("e", 41)]
        res = await store.place(NS, robot, batch, budget)
        assert (res.admitted, res.rejected, res.evicted) == model.place(batch, budget)
        assert (res.admitted, res.rejected, res.evicted) == (["c", "d"], ["e"], ["a"])

        assert await store.touch(NS, robot, "c", 1_900_000_000_000) == model.touch(
            "c", 1_900_000_000_000
        )
        entries = [("d", 0), ("zz", 0)]
        assert (await store.remove(NS, robot, entries)).keys == model.remove(entries) == ["d"]
        items, tokens = await store.snapshot(NS, robot)
        assert (items, tokens) == (model.eviction_order(), model.tokens)
        assert [i.key for i in items] == ["c", "b"]

        # The keys really live on the node that owns the robot's slot.
        host, port = node_name.rsplit(":", 1)
        node = aioredis.Redis(host=host, port=int(port), decode_responses=True)
        # every key but `pending` (no recall load is pending) and `state` (none written)
        assert await node.exists(*robot_keys(NS, robot)) == len(RobotKeys._fields) - 2
        await node.aclose()

        # A rebuild restores the snapshot exactly, also after the script caches are flushed.
        await redis_cluster.script_flush()
        restored = await store.load(NS, robot, items, budget)
        assert restored.admitted == ["c", "b"]
        assert await store.snapshot(NS, robot) == (items, tokens)
        assert await store.usage(NS, robot) == (tokens, 2)


async def test_the_change_stream_and_group_keys_on_redis_cluster(redis_cluster):
    """A group's working memory (`group:<name>`) and its change stream share one slot."""
    store = WorkingMemoryStore(redis_cluster)
    for owner in ("group:desk", "robot-7"):
        keys = robot_keys(NS, owner)
        assert len({redis_cluster.keyslot(k) for k in keys}) == 1
        await store.load(NS, owner, [item("a", 5, added=1)], 10)
        await store.place(NS, owner, [item("b", 6, 2.0, added=2)], 10)  # evicts a
        await store.remove(NS, owner, [("b", 0)])
        entries = await store.events_after(NS, owner, "0-0", block_ms=10, count=100)
        assert [(f["kind"], f.get("key")) for _, f in entries] == [
            ("cleared", None),
            ("added", "a"),
            ("evicted", "a"),
            ("added", "b"),
            ("removed", "b"),
        ]
        _, _, last_id = await store.snapshot_at(NS, owner)
        assert last_id == entries[-1][0]
        assert await store.has_event(NS, owner, last_id)
        assert await store.events_after(NS, owner, last_id, block_ms=10) == []


async def test_usage_of_robots_on_every_node_in_one_call_on_redis_cluster(redis_cluster):
    store = WorkingMemoryStore(redis_cluster)
    robots = list(robots_on_distinct_nodes(redis_cluster).values())
    for n, robot in enumerate(robots, start=1):
        await store.load(NS, robot, [item(f"k{i}", 3) for i in range(n)], 100)
    expected = [(3 * n, n) for n in range(1, len(robots) + 1)]
    assert await store.usage_many(NS, robots) == expected
    # A node that forgot the script is sent it again; a robot never loaded is None.
    await redis_cluster.script_flush()
    assert await store.usage_many(NS, [*robots, "robot-never"]) == [*expected, None]


async def test_the_suite_runs_on_a_cluster_when_asked(client, redis) -> None:
    """HTM_TEST_REDIS_CLUSTER=1 (CI's second run of the `cluster` tests): the apps and the
    tests' clients are cluster clients of a 3-master cluster; otherwise of one server."""
    app_redis = client.app.state.components.redis
    assert isinstance(app_redis, RedisCluster) is CLUSTER
    assert isinstance(redis, RedisCluster) is CLUSTER
    if CLUSTER:
        await app_redis.initialize()
        assert len(app_redis.get_primaries()) == 3


async def test_requests_degrade_while_no_cluster_node_answers(app_factory, cluster_nodes, ns):
    """With every node down, a cluster client fails with RedisClusterException (no node to
    learn the slots from), not a RedisError: still "Redis is unavailable", never a 500."""
    url = cluster_nodes[0].url
    async with app_factory(redis_url=url, redis_cluster=True, redis_retry_after_s=0) as client:
        client.headers["X-Namespace"] = ns
        body = {"key": "before", "content": "walrus tusks", "importance": 3}
        r = await client.post("/v1/robots/a/memories", json=body)
        assert r.status_code == 201 and r.json()["working_memory"]["admitted"] is True
        wm = (await client.get("/v1/robots/a/working-memory")).json()
        assert [i["key"] for i in wm["items"]] == ["before"]

        for node in cluster_nodes:
            node.stop()
        body = {"key": "during", "content": "zebra stripes", "importance": 9}
        r = await client.post("/v1/robots/a/memories", json=body)
        assert r.status_code == 201
        assert r.json()["working_memory"] == {
            "admitted": False,
            "reason": "unavailable",
            "evicted": [],
        }
        # Context comes from Postgres membership (scores move with the clock: keys only).
        r = await client.get("/v1/robots/a/context")
        assert r.status_code == 200 and r.json()["degraded"] is True
        assert [i["key"] for i in r.json()["items"]] == ["before"]
        r = await client.get("/v1/robots/a/working-memory")
        assert r.status_code == 200 and r.json() == {**wm, "degraded": True}
        # The change stream has no Postgres fallback: 503, as when a single Redis is down.
        r = await client.get("/v1/robots/a/working-memory/events")
        assert r.status_code == 503
        assert r.headers["content-type"] == "application/problem+json"


async def _close_the_next_connection_taken(cluster: RedisCluster) -> str:
    """Close the first connection a command takes from the cluster client's pools, before the
    command writes on it, as redis-py's own failover handling does (after a ClusterDownError it
    closes every node's connections, also those other requests hold); returns the node's name.
    On Python 3.11 a command's write runs in a task of asyncio.wait_for's own, so a loop turn
    separates taking the connection from writing on it: the moment this closes it in."""
    while True:
        for node in cluster.get_nodes():
            free = set(node._free)
            taken = [c for c in node._connections if c not in free and c.is_connected]
            if taken:
                await taken[0].disconnect(nowait=True)
                return node.name
        await asyncio.sleep(0)


async def test_a_connection_closed_as_its_command_is_sent_is_redis_unavailable(
    app_factory, cluster_nodes, ns
):
    """During a failover a command could find its connection closed under it before it wrote
    (redis-py: AttributeError: 'NoneType' object has no attribute 'writelines'): a read
    answered 500, an add was reported not admitted and its robot queued for repair. It is a
    connection error now: the cluster client finds the slots again and sends the command once
    more (nothing was sent), so the read is served from Redis and the add placed."""
    url = cluster_nodes[0].url
    async with app_factory(redis_url=url, redis_cluster=True, redis_retry_after_s=0) as client:
        client.headers["X-Namespace"] = ns
        cluster = client.app.state.components.redis
        body = {"key": "warm", "content": "walrus tusks", "importance": 3}
        r = await client.post("/v1/robots/a/memories", json=body)
        assert r.status_code == 201 and r.json()["working_memory"]["admitted"] is True

        closer = asyncio.create_task(_close_the_next_connection_taken(cluster))
        r = await client.get("/v1/robots/a/context")
        assert closer.done(), "no command took a connection"
        assert r.status_code == 200, r.text
        assert r.json()["degraded"] is False
        assert [i["key"] for i in r.json()["items"]] == ["warm"]

        closer = asyncio.create_task(_close_the_next_connection_taken(cluster))
        body = {"key": "during", "content": "zebra stripes", "importance": 3}
        r = await client.post("/v1/robots/a/memories", json=body)
        assert closer.done(), "no command took a connection"
        assert r.status_code == 201, r.text
        assert r.json()["working_memory"] == {"admitted": True, "reason": "admitted", "evicted": []}
        r = await client.get("/v1/robots/a/working-memory")
        assert r.status_code == 200 and r.json()["degraded"] is False
        assert sorted(i["key"] for i in r.json()["items"]) == ["during", "warm"]
