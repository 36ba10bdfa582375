"""The Redis working-memory store against a real Redis: eviction, rejection, NOINIT, rebuild."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from app.working_memory.items import WMItem
from app.working_memory.store import WorkingMemoryNotInitialized, WorkingMemoryStore, robot_keys
from tests.working_memory.helpers import NS, access_order, item, meta


def keys_of(items: list[WMItem]) -> list[str]:
    return [i.key for i in items]


async def test_eviction_drops_lowest_importance_then_oldest(store, robot):
    await store.load(NS, robot, [], 60)
    five = [
        item("old-low", importance=1.0, added=100),
        item("new-low", importance=1.0, added=300),
        item("mid-low", importance=1.0, added=200),
        item("two-new", importance=2.0, added=400),
        # Barely more important but far older: must still outlive "two-new". Packing
        # importance and age into one float score would get this wrong.
        item("two-plus-old", importance=2.000001, added=50),
    ]
    res = await store.place(NS, robot, five, 60)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == (keys_of(five), [], [], 50)
    snap, tokens = await store.snapshot(NS, robot)
    assert keys_of(snap) == ["old-low", "mid-low", "new-low", "two-new", "two-plus-old"]
    assert tokens == 50

    res = await store.place(NS, robot, [item("big", tokens=30, importance=5.0, added=500)], 60)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == (
        ["big"],
        [],
        ["old-low", "mid-low"],
        60,
    )
    snap, tokens = await store.snapshot(NS, robot)
    assert keys_of(snap) == ["new-low", "two-new", "two-plus-old", "big"]
    assert tokens == 60


async def test_item_larger_than_budget_is_rejected_without_disturbing_others(store, robot):
    await store.load(NS, robot, [item("a", added=1), item("b", added=2)], 30)
    before = await store.snapshot(NS, robot)

    res = await store.place(NS, robot, [item("huge", tokens=31)], 30)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == ([], ["huge"], [], 20)
    assert await store.snapshot(NS, robot) == before

    # A present item re-placed too large is rejected and removed; the rest stay.
    res = await store.place(NS, robot, [item("a", tokens=31)], 30)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == ([], ["a"], [], 10)
    snap, tokens = await store.snapshot(NS, robot)
    assert (keys_of(snap), tokens) == (["b"], 10)
    assert await access_order(store._redis, NS, robot) == [("b", float(item("b").last_access_ms))]


async def test_item_evicted_by_later_item_of_same_call_is_reported_evicted_not_admitted(
    store, robot
):
    await store.load(NS, robot, [], 20)
    res = await store.place(
        NS,
        robot,
        [
            item("x", importance=1, added=1),
            item("y", importance=5, added=2),
            item("z", importance=3, added=3),
        ],
        20,
    )
    assert (res.admitted, res.rejected, res.evicted) == (["y", "z"], [], ["x"])
    snap, _ = await store.snapshot(NS, robot)
    assert keys_of(snap) == ["z", "y"]


async def test_replacing_keeps_original_added_at_and_updates_the_rest(store, robot):
    await store.load(NS, robot, [item("a", added=100, access=50), item("b", added=200)], 100)
    updated = item(
        "a", tokens=7, importance=1.0, added=999, access=10, content="new", from_recall=True
    )
    res = await store.place(NS, robot, [updated], 100)
    assert (res.admitted, res.evicted, res.tokens) == (["a"], [], 17)
    snap, _ = await store.snapshot(NS, robot)
    # Still the oldest, so still evicted first; last access never moves backwards.
    assert snap[0] == WMItem("a", "new", 7, 1.0, 100, 50, True)
    assert keys_of(snap) == ["a", "b"]


async def test_smaller_budget_evicts_down_to_it_even_when_nothing_is_admitted(store, robot):
    await store.load(NS, robot, [item("a", added=1), item("b", added=2), item("c", added=3)], 30)
    res = await store.place(NS, robot, [item("too-big", tokens=25)], 15)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == (
        [],
        ["too-big"],
        ["a", "b"],
        10,
    )
    assert await store.usage(NS, robot) == (10, 1)


async def test_touch_remove_clear(store, robot, redis):
    await store.load(
        NS, robot, [item("a", access=5), item("b", access=6), item("c", access=7)], 100
    )
    assert await store.touch(NS, robot, "a", 9) == 0  # the memory id found (items here: 0)
    assert await store.touch(NS, robot, "b", 1) == 0  # older than its last access: no change
    assert await store.touch(NS, robot, "nope", 9) is None
    assert await access_order(redis, NS, robot) == [("b", 6.0), ("c", 7.0), ("a", 9.0)]
    snap, _ = await store.snapshot(NS, robot)
    assert {i.key: i.last_access_ms for i in snap} == {"a": 9, "b": 6, "c": 7}

    assert (await store.remove(NS, robot, [("c", 0), ("nope", 0), ("c", 0)])).keys == ["c"]
    assert await store.usage(NS, robot) == (20, 2)
    assert (await store.clear(NS, robot)).count == 2
    assert await store.usage(NS, robot) == (0, 0)
    assert (await store.place(NS, robot, [item("d")], 100)).admitted == ["d"]


async def test_every_change_bumps_seq_by_one_and_replies_its_generation(store, robot, redis):
    loaded = await store.load(NS, robot, [], 100)
    assert loaded.change == (loaded.seq, loaded.seq)  # a load starts a generation
    placed = await store.place(NS, robot, [item("a")], 100)
    assert placed.change == (loaded.gen, loaded.seq + 1)
    await store.touch(NS, robot, "a", 1)  # an access: not a change
    assert (await store.remove(NS, robot, [("zzz", 0)])).change == (loaded.gen, loaded.seq + 2)
    assert (await store.clear(NS, robot)).change == (loaded.gen, loaded.seq + 3)
    assert int((await meta(redis, NS, robot))["seq"]) == loaded.seq + 3
    reloaded = await store.load(NS, robot, [], 100)
    assert reloaded.seq > loaded.seq + 3 and reloaded.gen == reloaded.seq


async def test_new_robot_is_not_initialized(store, robot):
    for call in (
        store.place(NS, robot, [item("a")], 100),
        store.touch(NS, robot, "a", 1),
        store.remove(NS, robot, [("a", 0)]),
        store.clear(NS, robot),
        store.snapshot(NS, robot),
    ):
        with pytest.raises(WorkingMemoryNotInitialized):
            await call
    assert await store.usage(NS, robot) is None


@pytest.mark.parametrize(
    ("ns", "robot_name", "bad_item", "budget"),
    [
        ("bad ns", "r", item("a"), 10),
        ("ns", "{r}", item("a"), 10),
        ("ns", "r" * 65, item("a"), 10),
        ("ns", "r", item("a", importance=10.5), 10),
        ("ns", "r", item("a", importance=float("nan")), 10),
        ("ns", "r", item("a", tokens=-1), 10),
        ("ns", "r", item("a", added=2**53), 10),
        ("ns", "r", item(""), 10),
        ("ns", "r", item("a"), -1),
    ],
)
async def test_invalid_input_raises_value_error_and_writes_nothing(
    store, redis, ns, robot_name, bad_item, budget
):
    with pytest.raises(ValueError):
        await store.load(ns, robot_name, [bad_item], budget)
    if ns == "ns" and len(robot_name) <= 64 and "{" not in robot_name:
        assert await redis.exists(*robot_keys(ns, robot_name)) == 0


def test_all_keys_of_a_robot_share_one_cluster_slot():
    keys = robot_keys("acme", "robot-1")
    assert keys.content == "htm:v2:{acme/robot-1}:content"
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"acme/robot-1")}


async def test_scripts_survive_script_flush(store, robot, redis):
    await store.load(NS, robot, [], 100)
    await redis.script_flush()
    assert (await store.place(NS, robot, [item("a")], 100)).admitted == ["a"]


async def test_usage_many_reads_every_robot_in_one_call_and_none_where_not_initialized(
    store, robot, redis
):
    other, missing = robot + "-2", robot + "-never"
    await store.load(NS, robot, [item("a", 7), item("b", 5)], 100)
    await store.load(NS, other, [item("c", 11)], 100)
    await redis.script_flush()  # the pipeline loads the script again itself
    assert await store.usage_many(NS, [robot, missing, other, robot]) == [
        (12, 2),
        None,
        (11, 1),
        (12, 2),
    ]
    assert await store.usage_many(NS, []) == []


async def test_ping_reports_server_version(store):
    assert (await store.ping()).split(".")[0].isdigit()


@pytest.mark.single_redis("FLUSHALL of its own server")
async def test_flushall_gives_noinit_and_load_restores_identical_snapshot(redis_server_factory):
    server = redis_server_factory.start()
    client = aioredis.from_url(server.url, decode_responses=True)
    store = WorkingMemoryStore(client)
    robot = "flushed"
    await store.load(NS, robot, [item("a", added=10), item("b", 5, 3.5, added=20)], 50)
    await store.place(NS, robot, [item("c", 20, 0.5, added=30, from_recall=True)], 50)
    await store.touch(NS, robot, "a", 1_800_000_000_000)
    before = await store.snapshot(NS, robot)
    access_before = await access_order(client, NS, robot)
    seq_before = int((await meta(client, NS, robot))["seq"])

    await client.flushall()
    await client.script_flush()  # a restarted server has lost its script cache too
    for call in (
        store.place(NS, robot, [item("d")], 50),
        store.touch(NS, robot, "a", 1),
        store.remove(NS, robot, [("a", 0)]),
        store.clear(NS, robot),
        store.snapshot(NS, robot),
    ):
        with pytest.raises(WorkingMemoryNotInitialized):
            await call
    assert await store.usage(NS, robot) is None
    assert await client.dbsize() == 0  # NOINIT scripts wrote nothing

    # The service rebuilds from Postgres: the same items, in eviction order.
    res = await store.load(NS, robot, before[0], 50)
    assert (res.admitted, res.rejected, res.evicted, res.tokens) == (["c", "a", "b"], [], [], 35)
    assert res.seq > seq_before  # clock-seeded: last-writer-wins in Postgres keeps working
    assert await store.snapshot(NS, robot) == before
    assert await access_order(client, NS, robot) == access_before
    await client.aclose()


async def test_outline_is_the_snapshot_without_contents_and_contents_reads_the_taken(store, robot):
    with pytest.raises(WorkingMemoryNotInitialized):
        await store.outline(NS, robot)
    with pytest.raises(WorkingMemoryNotInitialized):
        await store.contents(NS, robot, ["a"])
    items = [
        item("a", importance=2.5, added=100),
        item("b", tokens=7, importance=1.0, added=200),
        item("c", tokens=3, importance=10.0, added=50),
    ]
    await store.load(NS, robot, items, 100)
    await store.touch(NS, robot, "b", 9_000_000_000_000)
    snap, _ = await store.snapshot(NS, robot)
    outline = await store.outline(NS, robot)
    assert [tuple(o) for o in outline] == [
        (i.key, i.tokens, i.importance, i.added_at_us, i.last_access_ms) for i in snap
    ]
    assert [o.key for o in outline] == ["b", "a", "c"]  # eviction order
    assert outline[0].last_access_ms == 9_000_000_000_000
    by_key = {i.key: i for i in snap}
    assert await store.contents(NS, robot, ["c", "gone", "b"]) == [
        (by_key["c"].content, 3),
        None,
        (by_key["b"].content, 7),
    ]
    assert await store.contents(NS, robot, []) == []
