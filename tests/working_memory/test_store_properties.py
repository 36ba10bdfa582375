"""Random operation sequences against the Redis store and the reference model, compared after
every step: contents, eviction order, access order, token total, seq, and every reply."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.working_memory.items import WMItem
from app.working_memory.store import WorkingMemoryNotInitialized
from tests.working_memory.helpers import NS, access_order, meta
from tests.working_memory.reference import NotInitialized, ReferenceModel

# Few keys (one with ":" and one non-ASCII, which sort by bytes in Redis), few timestamps
# and importances: collisions, re-placements and ties are the interesting cases.
keys = st.sampled_from(["a", "b", "c", "d", "e", "a:b", "é"])
importances = st.sampled_from([0.0, 1.0, 2.5, 10.0]) | st.floats(0, 10)
items = st.builds(
    WMItem,
    key=keys,
    content=st.text(max_size=6),
    tokens=st.integers(0, 60),
    importance=importances,
    added_at_us=st.integers(1_700_000_000_000_000, 1_700_000_000_000_004),
    last_access_ms=st.integers(0, 6),
    from_recall=st.booleans(),
    memory_id=st.sampled_from([1, 1, 2]),
)
budgets = st.sampled_from([0, 40, 100, 150])
load_op = st.tuples(st.just("load"), st.lists(items, max_size=5), budgets)
ops = st.one_of(
    st.tuples(st.just("place"), st.lists(items, max_size=4), budgets),
    load_op,
    st.tuples(st.just("touch"), keys, st.integers(0, 8)),
    st.tuples(st.just("remove"), st.lists(st.tuples(keys, st.sampled_from([1, 2])), max_size=3)),
    st.tuples(st.just("clear")),
)


async def apply(store, model: ReferenceModel, robot: str, op: tuple) -> None:
    """Runs op on both; they must agree on the reply or on raising NOINIT."""
    name, *args = op
    try:
        if name == "place":
            res = await store.place(NS, robot, *args)
            assert (res.admitted, res.rejected, res.evicted) == model.place(*args)
            assert res.seq == model.seq
            assert res.tokens == model.tokens <= args[1]
        elif name == "load":
            res = await store.load(NS, robot, *args)
            assert (res.admitted, res.rejected, res.evicted) == model.load(*args, seq=res.seq)
            assert res.tokens == model.tokens <= args[1]
        elif name == "touch":
            assert await store.touch(NS, robot, *args) == model.touch(*args)
        elif name == "remove":
            res = await store.remove(NS, robot, *args)
            assert res.keys == model.remove(*args)
            assert res.change.seq == model.seq
        else:
            res = await store.clear(NS, robot)
            assert res.count == model.clear()
            assert res.change.seq == model.seq
    except WorkingMemoryNotInitialized:
        assert not model.initialized, f"store said NOINIT, model is initialized ({op})"
        return
    assert model.initialized, f"model said NOINIT, store acted ({op})"


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    # A few calls on the uninitialized robot (must all be NOINIT), then a load, then anything.
    before=st.lists(ops, max_size=2),
    first_load=load_op,
    after=st.lists(ops, max_size=25),
)
async def test_store_matches_reference_model_after_every_step(
    store, redis, before, first_load, after
):
    robot = f"prop-{uuid.uuid4().hex[:12]}"
    model = ReferenceModel()
    for op in [*before, first_load, *after]:
        await apply(store, model, robot, op)
        if not model.initialized:
            assert await store.usage(NS, robot) is None
            continue
        snap, tokens = await store.snapshot(NS, robot)
        assert snap == model.eviction_order(), op
        assert tokens == model.tokens
        assert await access_order(redis, NS, robot) == model.access_order()
        assert int((await meta(redis, NS, robot))["seq"]) == model.seq
        assert await store.usage(NS, robot) == (model.tokens, len(model.items))


def test_reference_model_refuses_before_load():
    with pytest.raises(NotInitialized):
        ReferenceModel().place([], 10)
