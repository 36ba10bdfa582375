"""Importance that learns from use (app/memories/learning.py): the rule's exact steps (used,
not used, pinned, forgotten nearby), their order kept across flushes and a failed flush, the
writer's importance kept beside the learned one, recall's importance signal and `explain`, a
forget's nearest neighbours stepped down, and bad feedback refused."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.session import create_sessionmaker
from app.memories.access import AccessTracker
from app.memories.learning import Steps, learned, step
from tests.memories.test_memories_api import PROBLEM

R = "/v1/robots/ann/memories"
NONE = {"used": 0, "unused": 0, "pinned": 0, "forgotten_nearby": 0}


@pytest.fixture
async def client(app_factory, ns):
    """An app whose access worker never runs: the tests flush."""
    async with app_factory(access_flush_interval_s=3600) as c:
        c.headers["X-Namespace"] = ns
        yield c


def test_each_step_moves_a_fraction_of_the_way_and_steps_compose_in_order() -> None:
    # α = 0.2 from importance 1: used 1 → 2.8, used → 4.24, not used → 3.392.
    used, unused = step("used", 0.2), step("unused", 0.2)
    assert learned(1, _read(used)) == pytest.approx(2.8, abs=1e-12)
    both = used.then(used).then(unused)
    assert (both.used, both.unused) == (2, 1)
    assert learned(1, _read(both)) == pytest.approx(3.392, abs=1e-12)
    # Composed, the steps are ℓ ↦ 0.512·ℓ + 2.88: from importance 5, 5.44.
    assert (both.scale, both.shift) == pytest.approx((0.512, 2.88), abs=1e-12)
    assert learned(5, _read(both)) == pytest.approx(5.44, abs=1e-12)
    # Another order, another value: not used first, then used twice.
    other = unused.then(used).then(used)
    assert learned(1, _read(other)) == pytest.approx(4.112, abs=1e-12)
    # Bounded: a hundred of either never passes 10 or 0, whatever the importance.
    many_used, many_unused = Steps(), Steps()
    for _ in range(100):
        many_used, many_unused = many_used.then(used), many_unused.then(unused)
    for importance in (0, 1, 10):
        assert 9.99999 < learned(importance, _read(many_used)) <= 10
        assert 0 <= learned(importance, _read(many_unused)) < 1e-8
    assert learned(3, None) is None


def _read(s: Steps) -> list[float]:
    return [s.scale, s.shift, s.used, s.unused, s.pinned, s.forgotten_nearby]


async def feedback(client, key: str, used: bool, robot: str = "ann") -> None:
    r = await client.post(f"/v1/robots/{robot}/memories/{key}/feedback", json={"used": used})
    assert r.status_code == 202, r.text
    assert r.json() == {
        "key": key,
        "used": used,
        "pinned": False,
        "step": 0.2,
        "learning_rate": 0.2,
    }


def shown(m: dict[str, Any]) -> tuple[Any, ...]:
    learned = m["learned_importance"]
    return (
        m["importance"],
        None if learned is None else round(learned, 9),
        m["used_count"],
        m["unused_count"],
    )


async def test_feedback_is_written_by_the_flush_and_learned_beside_the_writers_importance(
    client,
) -> None:
    c = client.app.state.components
    await client.post(R, json={"key": "k", "content": "the deploy runbook", "importance": 1})
    await client.post(R, json={"key": "other", "content": "lunch", "importance": 1})
    await feedback(client, "k", True)
    await feedback(client, "k", True, robot="bob")  # any robot that reads it
    await feedback(client, "k", False)
    # Nothing on the request's path.
    assert shown((await client.get(f"{R}/k")).json()) == (1, None, 0, 0)
    assert await c.access.flush() == 4  # three steps and the retrieve just now
    assert shown((await client.get(f"{R}/k")).json()) == (1, 3.392, 2, 1)
    assert shown((await client.get(f"{R}/other")).json()) == (1, None, 0, 0)
    # A later flush composes after the stored steps: used once more, 3.392 + 0.2·6.608.
    await feedback(client, "k", True)
    await c.access.flush()
    after = (await client.get(f"{R}/k")).json()
    assert shown(after) == (1, 4.7136, 3, 1)
    assert after["version"] == 1  # the memory itself is not rewritten
    # The writer's importance moves the learned one with it: 0.4096·5 + 4.3040 (the steps).
    r = await client.patch(f"{R}/k", json={"importance": 5})
    assert shown(r.json()) == (5, 6.352, 3, 1)
    assert shown((await client.get(f"{R}/k")).json()) == (5, 6.352, 3, 1)
    listed = {m["key"]: shown(m) for m in (await client.get(R)).json()["items"]}
    assert listed == {"k": (5, 6.352, 3, 1), "other": (1, None, 0, 0)}


async def test_a_failed_flush_keeps_the_steps_in_their_order(client) -> None:
    c = client.app.state.components
    await client.post(R, json={"key": "k", "content": "x", "importance": 1})
    row = (await client.get(f"{R}/k")).json()
    dead = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    tracker = AccessTracker(create_sessionmaker(dead), learning_rate=0.2)
    tracker.record_feedback(row["id"], "unused")
    with pytest.raises(Exception):  # noqa: B017 - the connection's error
        await tracker.flush()
    tracker.record_feedback(row["id"], "used")  # after the failed one
    tracker.sessionmaker = c.sessionmaker
    assert await tracker.flush() == 2
    await dead.dispose()
    # Not used, then used: 1 → 0.8 → 2.64 (the other order would give 2.24).
    assert shown((await client.get(f"{R}/k")).json()) == (1, 2.64, 1, 1)


async def test_recall_explains_the_learned_importance_and_its_signal_uses_it(client) -> None:
    c = client.app.state.components
    for key in ("a", "b"):
        await client.post(R, json={"key": key, "content": f"deploy notes {key}", "importance": 5})
    await feedback(client, "b", True)
    await feedback(client, "a", False)
    await c.access.flush()

    async def recall(signals: dict[str, float] | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "query": "deploy notes",
            "strategy": "hybrid",
            "limit": 2,
            "load_into_working_memory": False,
            "explain": True,
            "min_score": 0,
        }
        if signals:
            body["signals"] = signals
        r = await client.post("/v1/robots/ann/recall", json=body)
        assert r.status_code == 200, r.text
        return r.json()["hits"]

    hits = await recall({"importance": 1.0})
    assert [h["key"] for h in hits] == ["b", "a"]
    explained = {h["key"]: h["explain"] for h in hits}
    assert {k: e["importance"] for k, e in explained.items()} == {
        "b": {**NONE, "written": 5.0, "learned": pytest.approx(6.0), "used": 1},
        "a": {**NONE, "written": 5.0, "learned": pytest.approx(4.0), "unused": 1},
    }
    assert {k: round(e["signals"]["importance"]["value"], 9) for k, e in explained.items()} == {
        "b": 0.6,
        "a": 0.4,
    }
    # With the default weights (no importance signal) explain still shows both values.
    plain = {h["key"]: h["explain"]["importance"]["learned"] for h in await recall()}
    assert plain == {"a": pytest.approx(4.0), "b": pytest.approx(6.0)}


async def test_bad_feedback_is_4xx_problem_json_and_records_nothing(client) -> None:
    c = client.app.state.components
    await client.post(R, json={"key": "k", "content": "x"})
    await c.access.flush()
    for body in (
        {"used": "yes"},
        {"used": 1},
        {},
        {"used": True, "extra": 1},
        {"used": None},
        {"pinned": False},
        {"pinned": 1},
        {"used": True, "pinned": True},
        {"used": False, "pinned": True},
    ):
        r = await client.post(f"{R}/k/feedback", json=body)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), body
    r = await client.post(f"{R}/missing/feedback", json={"used": True})
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)
    assert c.access.pending == 0
    await client.delete(f"{R}/k")
    r = await client.post(f"{R}/k/feedback", json={"used": True})
    assert r.status_code == 404  # a forgotten memory learns nothing
    assert c.access.pending == 0
    # A robot that may not read a memory cannot teach it (nor learn that it exists).
    await client.post(R, json={"key": "mine", "content": "y", "visibility": "private"})
    r = await client.post("/v1/robots/bob/memories/mine/feedback", json={"used": False})
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)
    assert c.access.pending == 0


def test_a_pin_steps_twice_as_far_up_and_a_forgotten_neighbour_half_as_far_down() -> None:
    pinned, nearby = step("pinned", 0.2), step("forgotten_nearby", 0.2)
    # From importance 1, a pin: 1 + 0.4·9 = 4.6; a forgotten neighbour: 1 − 0.1·1 = 0.9.
    assert learned(1, _read(pinned)) == pytest.approx(4.6, abs=1e-12)
    assert learned(1, _read(nearby)) == pytest.approx(0.9, abs=1e-12)
    assert (pinned.pinned, pinned.used, nearby.forgotten_nearby, nearby.unused) == (1, 0, 1, 0)
    # Order matters and is kept: pinned then a neighbour forgotten, 4.6 → 4.14; the other
    # way, 0.9 → 4.54.
    assert learned(1, _read(pinned.then(nearby))) == pytest.approx(4.14, abs=1e-12)
    assert learned(1, _read(nearby.then(pinned))) == pytest.approx(4.54, abs=1e-12)
    both = pinned.then(nearby).then(step("used", 0.2)).then(step("unused", 0.2))
    assert (both.used, both.unused, both.pinned, both.forgotten_nearby, both.count) == (
        1, 1, 1, 1, 4,
    )  # fmt: skip
    # At the highest α (0.5) a pin goes the whole way, and no further, from any importance.
    for importance in (0, 3, 10):
        assert learned(importance, _read(step("pinned", 0.5))) == 10
    many = Steps()
    for _ in range(300):
        many = many.then(nearby)
    assert 0 <= learned(10, _read(many)) < 1e-12


async def pin(client, key: str, robot: str = "ann") -> None:
    r = await client.post(f"/v1/robots/{robot}/memories/{key}/feedback", json={"pinned": True})
    assert r.status_code == 202, r.text
    assert r.json() == {
        "key": key,
        "used": None,
        "pinned": True,
        "step": 0.4,
        "learning_rate": 0.2,
    }


def counts(m: dict[str, Any]) -> tuple[Any, ...]:
    """importance, learned (rounded), used, unused, pinned, forgotten nearby."""
    return (*shown(m), m["pinned_count"], m["forgotten_nearby_count"])


async def test_a_pin_is_a_step_of_the_same_rule_in_order_with_the_other_feedback(client) -> None:
    c = client.app.state.components
    await client.post(R, json={"key": "k", "content": "the runbook", "importance": 1})
    await pin(client, "k")
    await feedback(client, "k", False)
    await c.access.flush()
    # 1 → 4.6 (pinned) → 3.68 (not used); the other order would give 0.8 → 4.48.
    assert counts((await client.get(f"{R}/k")).json()) == (1, 3.68, 0, 1, 1, 0)


def vector(angle: float) -> list[float]:
    """A unit vector at `angle` radians from e0 in the (e0, e1) plane: cos(angle) to e0."""
    v = [0.0] * 384
    v[0], v[1] = math.cos(angle), math.sin(angle)
    return v


async def test_forgetting_steps_down_the_nearest_memories_the_robot_may_read(client) -> None:
    c = client.app.state.components
    # Cosine similarity to `gone`: a 0.99, b 0.95, c 0.9, d 0.85 (all ≥ 0.8, only 3 taken),
    # far 0.5; hidden 0.999 but private to bob; pending has no vector.
    angles = {"a": 0.1415, "b": 0.3176, "c": 0.451, "d": 0.5548, "far": 1.0472}
    await client.post(R, json={"key": "gone", "content": "g", "embedding": vector(0.0)})
    for key, angle in angles.items():
        body = {"key": key, "content": key, "embedding": vector(angle), "importance": 5}
        assert (await client.post(R, json=body)).status_code == 201
    hidden = {"key": "hidden", "content": "h", "embedding": vector(0.0447), "importance": 5}
    r = await client.post("/v1/robots/bob/memories", json={**hidden, "visibility": "private"})
    assert r.status_code == 201
    await client.post(R, json={"key": "pending", "content": "p", "importance": 5})
    await c.access.flush()
    assert c.access.pending == 0

    r = await client.delete(f"{R}/gone")
    assert r.status_code == 200, r.text
    assert c.access.pending == 3  # the three nearest ann may read, none written yet
    await c.access.flush()
    got = {m["key"]: counts(m) for m in (await client.get(R)).json()["items"]}
    # Each of a, b, c: 5 − 0.1·5 = 4.5, one forgotten neighbour.
    assert got == {
        "a": (5, 4.5, 0, 0, 0, 1),
        "b": (5, 4.5, 0, 0, 0, 1),
        "c": (5, 4.5, 0, 0, 0, 1),
        "d": (5, None, 0, 0, 0, 0),
        "far": (5, None, 0, 0, 0, 0),
        "pending": (5, None, 0, 0, 0, 0),
    }
    bobs = (await client.get("/v1/robots/bob/memories/hidden")).json()
    assert counts(bobs) == (5, None, 0, 0, 0, 0)
    await c.access.flush()  # bob's retrieve
    # The hard delete of the memory already forgotten steps nobody again.
    r = await client.request("DELETE", f"{R}/gone", params={"hard": "true", "confirm": "gone"})
    assert r.status_code == 200, r.text
    assert c.access.pending == 0
    # Forgetting `a` (its nearest now: b 0.984, c 0.952, d 0.918) steps them; b: 4.5 → 4.05.
    await client.delete(f"{R}/a")
    await c.access.flush()
    got = {m["key"]: counts(m) for m in (await client.get(R)).json()["items"]}
    assert {k: got[k] for k in ("b", "c", "d")} == {
        "b": (5, 4.05, 0, 0, 0, 2),
        "c": (5, 4.05, 0, 0, 0, 2),
        "d": (5, 4.5, 0, 0, 0, 1),
    }
    hits = await _explained(client, "b", vector(0.3176))
    assert hits["b"]["importance"] == {**NONE, "written": 5.0, "learned": pytest.approx(4.05),
                                       "forgotten_nearby": 2}  # fmt: skip


async def test_the_neighbours_stepped_are_bounded_by_the_settings(app_factory, ns) -> None:
    async with app_factory(
        access_flush_interval_s=3600,
        importance_forget_nearby=2,
        importance_forget_similarity=0.96,
    ) as client:
        client.headers["X-Namespace"] = ns
        c = client.app.state.components
        await client.post(R, json={"key": "gone", "content": "g", "embedding": vector(0.0)})
        for key, angle in {"a": 0.1415, "b": 0.3176}.items():
            await client.post(R, json={"key": key, "content": key, "embedding": vector(angle)})
        # a at 0.99 of it; b at 0.95, under 0.96 though within the 2 nearest.
        await client.delete(f"{R}/gone")
        assert c.access.pending == 1
        await c.access.flush()
        got = {m["key"]: m["forgotten_nearby_count"] for m in (await client.get(R)).json()["items"]}
        assert got == {"a": 1, "b": 0}
        await client.delete(f"{R}/b")  # a at 0.984 of b
        assert c.access.pending == 1
        await c.access.flush()
        await client.delete(f"{R}/a")  # nothing live near it any more
        assert c.access.pending == 0
    async with app_factory(access_flush_interval_s=3600, importance_forget_nearby=0) as client:
        client.headers["X-Namespace"] = ns
        c = client.app.state.components
        await client.post(R, json={"key": "x", "content": "x", "embedding": vector(0.0)})
        await client.post(R, json={"key": "y", "content": "y", "embedding": vector(0.01)})
        await client.delete(f"{R}/x")
        assert c.access.pending == 0


async def _explained(client, key: str, embedding: list[float]) -> dict[str, Any]:
    body = {
        "query": key,
        "embedding": embedding,
        "strategy": "vector",
        "limit": 5,
        "load_into_working_memory": False,
        "explain": True,
        "min_score": 0,
    }
    r = await client.post("/v1/robots/ann/recall", json=body)
    assert r.status_code == 200, r.text
    return {h["key"]: h["explain"] for h in r.json()["hits"]}


async def test_a_forget_an_import_or_a_load_replays_steps_no_neighbour(client) -> None:
    """`htm import` of a forgotten record and `htm load` dropping a chunk forget through
    app/transfer/sync.py with nearby=False: the file carries the neighbours' steps already,
    and a chunk replaced is not judged."""
    from app.auth.caller import Caller
    from app.transfer.sync import forget

    c = client.app.state.components
    await client.post(R, json={"key": "old", "content": "o", "embedding": vector(0.0)})
    await client.post(R, json={"key": "twin", "content": "t", "embedding": vector(0.01)})
    ns = client.headers["X-Namespace"]
    async with c.sessionmaker() as session:
        found = await session.execute(text("SELECT id FROM namespace WHERE name = :n"), {"n": ns})
        ns_id = found.scalar_one()
    await forget(c, Caller(ns_id, ns, "admin"), "ann", "old")
    assert c.access.pending == 0  # no step
    assert (await client.get(f"{R}/old")).status_code == 404  # forgotten
    await c.access.flush()
    assert counts((await client.get(f"{R}/twin")).json()) == (1, None, 0, 0, 0, 0)
