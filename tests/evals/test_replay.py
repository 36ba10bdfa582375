"""The eval's usage stream (evals/replay.py) against the real app (no embedder: full text
only): each turn asked in its own words, the cascade's feedback, and what it leaves."""

from __future__ import annotations

import uuid

from evals.replay import Replayed, feedback_of, own_memory, replay
from evals.runner import load
from tests.evals.test_runner import _set


def test_the_cascade_marks_the_turn_used_and_only_the_hits_above_it_not_used() -> None:
    assert feedback_of("c", ["a", "b", "c", "d"]) == [("a", False), ("b", False), ("c", True)]
    assert feedback_of("a", ["a", "b"]) == [("a", True)]
    assert feedback_of("x", ["a", "b"]) == [("a", False), ("b", False)]  # none was of use
    assert feedback_of("x", []) == []


def test_a_turn_stored_as_a_duplicate_is_looked_for_as_the_memory_of_its_content() -> None:
    hits = [{"key": "t1", "content": "Mia: ok"}, {"key": "t7", "content": "Mia: Hmm, yeah."}]
    assert own_memory("t9", "Mia: Hmm, yeah.", hits) == "t7"  # t9 was stored as t7
    assert own_memory("t1", "Mia: ok", hits) == "t1"
    assert own_memory("t9", "Leo: no", hits) == "t9"  # not found: every hit read, none used
    assert feedback_of(own_memory("t9", "Mia: Hmm, yeah.", hits), ["t1", "t7"]) == [
        ("t1", False), ("t7", True),
    ]  # fmt: skip


async def test_replay_gives_feedback_and_accesses_through_the_api(app_factory) -> None:  # type: ignore[no-untyped-def]
    prefix = f"t-{uuid.uuid4().hex[:8]}-"
    evalset = _set()
    async with app_factory(access_flush_interval_s=3600) as client:
        await load(client, evalset, prefix, embedded=False)
        got = await replay(client, evalset, prefix)
        await client.app.state.components.access.flush()
        ns = {"x-namespace": f"{prefix}conv-docs-d01"}
        r = await client.get("/v1/robots/evals/memories", headers=ns)
        shown = {
            m["key"]: (m["access_count"], m["used_count"], m["unused_count"])
            for m in r.json()["items"]
        }
    assert got == Replayed(queries=4, found=4, first=4, used=4, unused=0)
    # d01: each turn found first by its own words; a Biscuit turn also found by the other's.
    assert shown == {
        "d01-s00-t000": (2, 1, 0),
        "d01-s00-t001": (1, 1, 0),
        "d01-s01-t000": (2, 1, 0),
    }
