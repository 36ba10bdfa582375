"""store.refresh (scripts/refresh.lua): a recall's hits that are in place already only move
their last access, and only when every hit is held exactly as a placement would leave it."""

from __future__ import annotations

import pytest

from app.working_memory.store import WorkingMemoryNotInitialized, robot_keys
from tests.working_memory.helpers import NS, access_order, item, meta


def hit(key: str, access: int, **kw) -> object:
    return item(key, access=access, from_recall=True, **kw)


async def stream_length(store, robot: str) -> int:
    return int(await store._redis.xlen(robot_keys(NS, robot).events))


async def test_refresh_moves_only_the_last_accesses_when_every_hit_is_held(store, robot):
    await store.load(NS, robot, [], 100)
    await store.place(NS, robot, [hit("a", 1000), hit("b", 5000), hit("c", 1000)], 100)
    before_meta, before_events = (
        await meta(store._redis, NS, robot),
        await stream_length(store, robot),
    )
    before_items = (await store.snapshot(NS, robot))[0]

    assert await store.refresh(NS, robot, [hit("a", 3000), hit("b", 3000)]) == []
    # a moves forward; b's later access is kept (never backwards); c is not asked about.
    assert await access_order(store._redis, NS, robot) == [
        ("c", 1000.0),
        ("a", 3000.0),
        ("b", 5000.0),
    ]
    # Not a change: seq, gen, tokens, the stream and every other field stay.
    assert await meta(store._redis, NS, robot) == before_meta
    assert await stream_length(store, robot) == before_events
    after_items = (await store.snapshot(NS, robot))[0]
    assert [i._replace(last_access_ms=0) for i in after_items] == [
        i._replace(last_access_ms=0) for i in before_items
    ]


@pytest.mark.parametrize(
    "changed",
    [
        {"key": "x"},  # not held at all
        {"content": "another text"},
        {"tokens": 11},
        {"importance": 2.5},
        {"memory_id": 7},  # the key names another memory now
        {"from_recall": False},
    ],
)
async def test_refresh_changes_nothing_when_one_hit_is_not_held_as_given(store, robot, changed):
    await store.load(NS, robot, [], 100)
    await store.place(NS, robot, [hit("a", 1000), hit("b", 1000)], 100)
    before = await access_order(store._redis, NS, robot), await meta(store._redis, NS, robot)
    other = hit("b", 9000)._replace(**changed)

    assert await store.refresh(NS, robot, [hit("a", 9000), other]) == [other.key]
    assert (await access_order(store._redis, NS, robot), await meta(store._redis, NS, robot)) == (
        before
    )


async def test_refresh_of_a_robot_redis_does_not_hold_asks_for_a_rebuild(store, robot):
    with pytest.raises(WorkingMemoryNotInitialized):
        await store.refresh(NS, robot, [hit("a", 1000)])
