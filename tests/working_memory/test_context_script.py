"""The context script (order and cut inside Redis) against assemble() over the snapshot: the
same items in the same order, the same text, token sum and scores (as exact doubles), for
every strategy, on a real Redis."""

from __future__ import annotations

import random
import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.working_memory.context import STRATEGIES, assemble
from app.working_memory.items import WMItem
from app.working_memory.store import WorkingMemoryNotInitialized
from tests.working_memory.helpers import NS, item

NOW_MS = 1_700_000_000_000
NOW_US = NOW_MS * 1000
HOUR_US = 3_600_000_000
BIG_BUDGET = 10_000_000


async def assert_context_matches_assemble(store, robot, max_tokens, now_ms):
    snapshot, _ = await store.snapshot(NS, robot)
    for strategy in STRATEGIES:
        contents, items, tokens = await store.context(
            NS, robot, strategy, max_tokens=max_tokens, now_ms=now_ms
        )
        expected = assemble(snapshot, strategy, max_tokens, now_ms)
        # orjson writes floats as their shortest round-trip text: equal bytes mean equal
        # doubles (and -0.0 is not 0.0, 1.0 is not 1).
        assert orjson.dumps(items) == orjson.dumps(expected.items), strategy
        assert "\n\n".join(contents) == expected.text, strategy
        assert tokens == expected.tokens, strategy


# Few keys, timestamps and importances, so that ties on score, added_at and both are common.
# Keys with '/' and '"' are escaped in the item JSON; "é" and ":" sort by bytes in Redis.
keys = st.sampled_from(["a", "b", "c", "d", "e", "f", "a:b", "é", "x/y", 'q"r', "k1", "k10"])
items = st.builds(
    WMItem,
    key=keys | st.text(alphabet="abcdef/é", min_size=1, max_size=4),
    content=st.text(max_size=12),  # quotes, backslashes, control characters, any Unicode
    tokens=st.integers(0, 60),
    importance=st.sampled_from([0.0, -0.0, 1.0, 2.5, 10.0]) | st.floats(0, 10),
    added_at_us=st.sampled_from([NOW_US - 30 * HOUR_US, NOW_US - HOUR_US, NOW_US, NOW_US + 5])
    | st.integers(NOW_US - 3, NOW_US + 3)
    | st.sampled_from([0, 2**53 - 1]),  # the extremes the store accepts
    last_access_ms=st.integers(NOW_MS - 3, NOW_MS),
    from_recall=st.booleans(),
    memory_id=st.sampled_from([0, 1, 2**53 - 1]),  # the item JSON's id field, up to its limit
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch=st.lists(items, max_size=80),
    max_tokens=st.integers(0, 400) | st.sampled_from([0, 1, 59, 60, 61, BIG_BUDGET]),
    now_ms=st.sampled_from([NOW_MS, NOW_MS - 1, NOW_MS + 7 * 3_600_000])
    | st.integers(NOW_MS - 10, NOW_MS + 10),
)
async def test_script_takes_exactly_what_assemble_takes(store, batch, max_tokens, now_ms):
    robot = f"ctx-{uuid.uuid4().hex[:12]}"
    await store.load(NS, robot, batch, BIG_BUDGET)
    await assert_context_matches_assemble(store, robot, max_tokens, now_ms)


async def test_empty_working_memory_gives_an_empty_context(store, robot):
    await store.load(NS, robot, [], 100)
    for strategy in STRATEGIES:
        assert await store.context(NS, robot, strategy, max_tokens=100, now_ms=NOW_MS) == (
            [],
            [],
            0,
        )


async def test_max_tokens_below_the_first_item_gives_an_empty_context(store, robot):
    await store.load(NS, robot, [item("a", tokens=10), item("b", tokens=1, importance=0.5)], 100)
    for strategy in STRATEGIES:
        assert await store.context(NS, robot, strategy, max_tokens=9, now_ms=NOW_MS) == ([], [], 0)
    await assert_context_matches_assemble(store, robot, 9, NOW_MS)


async def test_an_item_larger_than_max_tokens_stops_the_context_in_the_middle(store, robot):
    await store.load(
        NS,
        robot,
        [
            item("first", tokens=10, importance=9, added=NOW_US - 1, access=NOW_MS - 1),
            item("huge", tokens=500, importance=8, added=NOW_US - 2, access=NOW_MS - 2),
            item("small", tokens=1, importance=7, added=NOW_US - 3, access=NOW_MS - 3),
        ],
        BIG_BUDGET,
    )
    for strategy in STRATEGIES:
        contents, items_, tokens = await store.context(
            NS, robot, strategy, max_tokens=100, now_ms=NOW_MS
        )
        assert ([i["key"] for i in items_], contents, tokens) == (
            ["first"],
            ["content of first"],
            10,
        )
    await assert_context_matches_assemble(store, robot, 100, NOW_MS)


def many(n: int, seed: int, batch: int) -> list[WMItem]:
    """n items as the service places them: batches share a last access and get increasing
    added_at; importance from a few values, so importance ties are long runs."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        b = i // batch
        out.append(
            item(
                f"k{rng.randrange(10**6):06d}-{i}",
                tokens=rng.choice([5, 17, 40, 400]),
                importance=rng.choice([0.0, 0.5, 1.0, 2.0, 3.3, 7.0, 10.0]),
                added=NOW_US - (n // batch - b) * HOUR_US + i,
                access=NOW_MS - (n // batch - b) * 1000,
                content=f"memory {i}: " + "word " * rng.randrange(20),
            )
        )
    return out


@pytest.mark.parametrize("max_tokens", [0, 50, 1_000, 8_000, 40_000, BIG_BUDGET])
async def test_a_thousand_items_in_batches_match_assemble(store, robot, max_tokens):
    # Batches of 500 (the API's largest) make 500-long ties on last access; reads from the
    # sorted sets come in slices of 32 to 256, so runs and cuts fall across slices.
    await store.load(NS, robot, many(1000, seed=max_tokens, batch=500), BIG_BUDGET)
    for now_ms in (NOW_MS, NOW_MS - 2 * 3_600_000):
        await assert_context_matches_assemble(store, robot, max_tokens, now_ms)


async def test_a_long_tie_on_importance_and_added_at_orders_by_key(store, robot):
    # 300 items with the same importance and added_at: the evict set holds them by key, and
    # the script must turn that round (smaller key first) across its slices.
    same = [
        item(f"k{i:03d}", tokens=3, importance=4.0, added=NOW_US, access=NOW_MS) for i in range(300)
    ]
    others = [item(f"z{i}", tokens=3, importance=4.0, added=NOW_US - i - 1) for i in range(20)]
    await store.load(NS, robot, same + others, BIG_BUDGET)
    for max_tokens in (30, 96, 300, 960, BIG_BUDGET):
        await assert_context_matches_assemble(store, robot, max_tokens, NOW_MS)
    _, items_, _ = await store.context(NS, robot, "important", max_tokens=30, now_ms=NOW_MS)
    assert [i["key"] for i in items_] == [f"k{i:03d}" for i in range(10)]


async def test_balanced_ages_items_by_the_given_clock(store, robot):
    # Same importance: the newer one scores higher, by exactly the formula; an item "added
    # in the future" counts as new (score = importance).
    await store.load(
        NS,
        robot,
        [
            item("hour-old", importance=6.0, added=NOW_US - HOUR_US),
            item("new", importance=2.0, added=NOW_US),
            item("future", importance=1.0, added=NOW_US + HOUR_US),
        ],
        BIG_BUDGET,
    )
    _, items_, _ = await store.context(NS, robot, "balanced", max_tokens=100, now_ms=NOW_MS)
    assert [(i["key"], i["score"]) for i in items_] == [
        ("hour-old", 3.0),
        ("new", 2.0),
        ("future", 1.0),
    ]
    # An hour later: 6/3 = 2.0 first; "new" (2/2) and "future" (1/1) tie at 1.0, and the
    # newer added_at goes first.
    _, items_, _ = await store.context(
        NS, robot, "balanced", max_tokens=100, now_ms=NOW_MS + 3_600_000
    )
    assert [i["key"] for i in items_] == ["hour-old", "future", "new"]
    await assert_context_matches_assemble(store, robot, 100, NOW_MS + 3_600_000)


async def test_context_of_an_uninitialized_robot_raises_noinit(store, robot):
    with pytest.raises(WorkingMemoryNotInitialized):
        await store.context(NS, robot, "recent", max_tokens=100, now_ms=NOW_MS)


async def test_context_rejects_bad_arguments(store, robot):
    await store.load(NS, robot, [], 100)
    with pytest.raises(ValueError):
        await store.context(NS, robot, "random", max_tokens=100, now_ms=NOW_MS)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.context(NS, robot, "recent", max_tokens=-1, now_ms=NOW_MS)
    with pytest.raises(ValueError):
        await store.context(NS, robot, "recent", max_tokens=100, now_ms=2**53 // 1000 + 1)
