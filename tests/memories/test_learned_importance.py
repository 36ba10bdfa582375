"""Importance that learns from feedback (app/memories/learning.py): the rule's exact steps,
their order kept across flushes and a failed flush, the writer's importance kept beside the
learned one, recall's importance signal and `explain`, and bad feedback refused."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.session import create_sessionmaker
from app.memories.access import AccessTracker
from app.memories.learning import Steps, learned, step
from tests.memories.test_memories_api import PROBLEM

R = "/v1/robots/ann/memories"


@pytest.fixture
async def client(app_factory, ns):
    """An app whose access worker never runs: the tests flush."""
    async with app_factory(access_flush_interval_s=3600) as c:
        c.headers["X-Namespace"] = ns
        yield c


def test_each_step_moves_a_fraction_of_the_way_and_steps_compose_in_order() -> None:
    # α = 0.2 from importance 1: used 1 → 2.8, used → 4.24, not used → 3.392.
    used, unused = step(True, 0.2), step(False, 0.2)
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
    return [s.scale, s.shift, s.used, s.unused]


async def feedback(client, key: str, used: bool, robot: str = "ann") -> None:
    r = await client.post(f"/v1/robots/{robot}/memories/{key}/feedback", json={"used": used})
    assert r.status_code == 202, r.text
    assert r.json() == {"key": key, "used": used, "learning_rate": 0.2}


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
    tracker.record_feedback(row["id"], False)
    with pytest.raises(Exception):  # noqa: B017 - the connection's error
        await tracker.flush()
    tracker.record_feedback(row["id"], True)  # after the failed one
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
        "b": {"written": 5.0, "learned": pytest.approx(6.0), "used": 1, "unused": 0},
        "a": {"written": 5.0, "learned": pytest.approx(4.0), "used": 0, "unused": 1},
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
    for body in ({"used": "yes"}, {"used": 1}, {}, {"used": True, "extra": 1}):
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
