"""A changed fact recognised without labels or an LLM (issue 47, item 2): the statement
parser (app/claims.py), the detector's `statement` rule measured end to end on the committed
sets of changes and of distinct facts (evals/changed_facts.py), applied by default because
its precision holds, and recall's newer statement first when it was only proposed."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from app.claims import parse
from app.recall.changed import newer_first
from app.recall.hits import SearchHit
from evals.changed_facts import PATH, dumped, generate
from tests.working_memory.tiers import wait_for_lock_waiters


@pytest.mark.parametrize(
    ("text", "speaker", "fact"),
    [
        ("Carla's favourite colour is purple now", None, ("carla", "favorite color", "purple")),
        ("Carla's favorite color is now purple.", None, ("carla", "favorite color", "purple")),
        ("my phone number is 555-0101", "Mei", ("mei", "phone number", "555-0101")),
        ("My number is 555-0199 now", None, ("agent", "phone number", "555-0199")),
        ("our standup is at 10:30", None, ("we", "standup time", "10:30")),
        ("we moved the standup to 10:30", None, ("we", "standup time", "10:30")),
        (
            "The weekly sync has been moved to Thursday",
            None,
            ("we", "weekly sync time", "thursday"),
        ),
        ("The standup is in room 4", None, ("we", "standup place", "room 4")),
        (
            "I moved my dentist appointment to Friday",
            "Ben",
            ("ben", "dentist appointment time", "friday"),
        ),
        ("Carla moved to Berlin", None, ("carla", "home", "berlin")),
        ("Carla's sister lives in Rome", None, ("carla's sister", "home", "rome")),
        ("I've moved to Lisbon", "Omar", ("omar", "home", "lisbon")),
        ("Carla works for Stark Industries now", None, ("carla", "employer", "stark industries")),
        ("Carla works as an engineer", None, ("carla", "job", "engineer")),
        ("Carla just turned 32", None, ("carla", "age", "32")),
        ("my manager's name is Tom", "Eva", ("eva's manager", "name", "tom")),
        ("The deadline moved to Monday", None, ("we", "deadline", "monday")),
        ("Update: our wifi password is hunter2", None, ("we", "wifi password", "hunter2")),
    ],
)
def test_the_parser_reads_the_common_shapes(text: str, speaker: str | None, fact: tuple) -> None:
    f = parse(text, speaker or "agent")
    assert f is not None and (f.subject, f.attribute, f.value) == fact


@pytest.mark.parametrize(
    "text",
    [
        "Carla's favourite colour is not green",
        "Carla's favourite colour was green",
        "Carla might move to Rome",
        "She lives in Rome",
        "Does Carla live in Rome?",
        "Carla lives in Rome during the summer",
        "Carla works at Hooli on weekends",
        "Carla's sister is a doctor",
        "Carla's car is red",
        "Carla's boss is great",
        "Carla likes pasta",
        "The standup is short",
        "Carla's favourite colour is green. She painted her room",
        "The standup is at 11:00 today",
        "Demo moved to Tuesday",
    ],
)
def test_the_parser_reads_nothing_it_is_unsure_of(text: str) -> None:
    assert parse(text, "agent") is None


def test_the_committed_sets_are_the_generators() -> None:
    sets = generate()
    assert PATH.read_text() == dumped(sets)
    assert (len(sets["changes"]), len(sets["distinct"])) == (130, 140)


async def _statement_found(client, old: dict, new: dict) -> bool:
    """Whether adding `new` after `old` (a fresh namespace, no labels) proposes `old` by the
    statement rule."""
    client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
    bodies = []
    for s in (old, new):
        body: dict = {"content": s["text"], "supersede": "propose"}
        if s["speaker"]:
            body["metadata"] = {"speaker": s["speaker"]}
        bodies.append(body)
    first = await client.post("/v1/robots/agent/memories", json=bodies[0])
    second = await client.post("/v1/robots/agent/memories", json=bodies[1])
    assert (first.status_code, second.status_code) == (201, 201), second.text
    proposals = second.json()["supersede_proposals"]
    assert all(p["key"] == first.json()["key"] for p in proposals)
    return [p["rule"] for p in proposals] == ["statement"]


async def test_the_statement_rule_precision_and_recall_on_the_committed_sets(client) -> None:
    """Measured through the service (parser, full-text lookup, rule): precision 1.0 (no
    distinct pair merged: above the 0.98 automatic supersedes need), recall 108/130."""
    sets = generate()
    found_changes = [await _statement_found(client, *p) for p in sets["changes"]]
    found_distinct = [await _statement_found(client, *p) for p in sets["distinct"]]
    tp, fp = sum(found_changes), sum(found_distinct)
    precision, recall = tp / (tp + fp), tp / len(found_changes)
    assert (tp, fp, len(found_changes) - tp) == (108, 0, 22)
    assert (round(precision, 4), round(recall, 4)) == (1.0, 0.8308)
    assert precision >= 0.98


async def _add(client, content: str, **body) -> dict:
    r = await client.post("/v1/robots/a/memories", json={"content": content, **body})
    assert r.status_code == 201, r.text
    return r.json()


async def _recall(client, query: str) -> list[dict]:
    body = {"query": query, "explain": True, "load_into_working_memory": False}
    r = await client.post("/v1/robots/a/recall", json=body)
    assert r.status_code == 200, r.text
    return r.json()["hits"]


async def test_carla_answers_purple_first_with_no_labels(client) -> None:
    """The default deployment: the change is recognised and applied, green ends."""
    green = await _add(client, "Carla's favourite colour is green")
    purple = await _add(client, "Carla's favourite colour is purple now")
    assert (purple["superseded"], purple["supersede_proposals"]) == ([green["key"]], [])
    hits = await _recall(client, "What is Carla's favourite colour?")
    assert [h["content"] for h in hits] == ["Carla's favourite colour is purple now"]
    r = await client.get(f"/v1/robots/a/memories/{green['key']}")
    assert (r.json()["superseded_by"], r.json()["valid_to"]) == (
        purple["key"],
        purple["valid_from"],
    )


async def test_two_adds_changing_one_fact_at_once_both_succeed_and_one_ends_it(client) -> None:
    """Both find green (the statement rule, applied by default) and wait on its row; the first
    to take it ends it, and the second, finding it ended, lets it go: 201, not the 409 an add
    naming green in `supersedes` would get. (The 1,000,000-memory bench's load, two batches in
    flight, was refused that way on 2026-12-07.)"""
    green = await _add(client, "Carla's favourite colour is green")
    engine = client.app.state.components.engine
    async with engine.connect() as conn:
        await conn.execute(
            text("SELECT 1 FROM memory WHERE key = :k FOR UPDATE"), {"k": green["key"]}
        )
        adds = [
            asyncio.create_task(_add(client, f"Carla's favourite colour is {c} now"))
            for c in ("purple", "blue")
        ]
        await wait_for_lock_waiters(client, 2)
        await conn.rollback()
    added = await asyncio.gather(*adds)
    assert sorted(a["superseded"] for a in added) == [[], [green["key"]]]
    (winner,) = [a for a in added if a["superseded"]]
    r = await client.get(f"/v1/robots/a/memories/{green['key']}")
    assert r.json()["superseded_by"] == winner["key"]
    # Named by the add itself, an ended memory is still a 409.
    r = await client.post(
        "/v1/robots/a/memories",
        json={"content": "Carla's favourite colour is red", "supersedes": [green["key"]]},
    )
    assert (r.status_code, r.json()["keys"]) == (409, [green["key"]])


async def test_a_proposed_change_still_answers_the_newer_value_first(app_factory, ns) -> None:
    """Only proposed (HTM_SUPERSEDE_STATEMENTS=propose): both stay current, and recall puts
    the newer value first though the older scores higher, the older naming it in
    `explain.newer`."""
    async with app_factory(supersede_statements="propose") as client:
        client.headers["X-Namespace"] = ns
        green = await _add(client, "Carla's favourite colour is green", importance=9)
        purple = await _add(client, "Update: Carla's favourite colour is now purple")
        await _add(client, "Carla's favourite food is pasta")
        assert purple["superseded"] == []
        assert [(p["key"], p["rule"], p["content"]) for p in purple["supersede_proposals"]] == [
            (green["key"], "statement", "Carla's favourite colour is green")
        ]
        hits = await _recall(client, "Is Carla's favourite colour still green?")
        assert [h["content"] for h in hits] == [
            "Update: Carla's favourite colour is now purple",
            "Carla's favourite colour is green",
            "Carla's favourite food is pasta",
        ]
        assert [h["explain"]["newer"] for h in hits] == [None, purple["key"], None]
        assert hits[1]["score"] > hits[0]["score"]  # green matches more of the question


async def test_what_the_default_applies_and_what_it_only_proposes(client) -> None:
    """Applied: a statement of now. Proposed: an add choosing `propose`, one with its own
    `valid_from`, and a second memory of the batch changing what the first already does."""
    old = await _add(client, "The standup is at 9:30")
    asked = await _add(client, "we moved the standup to 10:30", supersede="propose")
    assert (asked["superseded"], [p["key"] for p in asked["supersede_proposals"]]) == (
        [],
        [old["key"]],
    )
    dated = await _add(client, "The standup is at 11:00", valid_from="2099-01-01T00:00:00Z")
    assert dated["superseded"] == []
    assert {p["key"] for p in dated["supersede_proposals"]} == {old["key"], asked["key"]}
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": "Carla lives in Oslo"}]},
    )
    assert r.status_code == 201, r.text
    oslo = r.json()["memories"][0]["key"]
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": "Carla moved to Rome"}, {"content": "Carla moved to Lima"}]},
    )
    assert r.status_code == 201, r.text
    rome, lima = r.json()["memories"]
    assert (rome["superseded"], rome["supersede_proposals"]) == ([oslo], [])
    assert lima["superseded"] == []
    assert [(p["key"], p["rule"]) for p in lima["supersede_proposals"]] == [(oslo, "statement")]
    off = await _add(client, "Carla moved to Quito", supersede="off")
    assert (off["superseded"], off["supersede_proposals"]) == ([], [])


def test_newer_first_gives_the_newest_statement_the_best_place_of_its_fact() -> None:
    """Three values of one fact at places 1, 3 and 4 of five: newest at 1, then by age;
    the other hits and a value said again keep their places."""

    def hit(i: int, content: str, day: int) -> SearchHit:
        at = datetime(2026, 1, day, tzinfo=UTC)
        return SearchHit(
            i, at, 1, f"k{i}", content, "fact", 1.0, [], {}, "a", 5, 1.0 / i, *[None] * 4
        )

    page = [
        hit(1, "Carla's favourite colour is green", 1),
        hit(2, "Carla's favourite food is pasta", 9),
        hit(3, "Carla's favourite colour is blue now", 5),
        hit(4, "Carla's favourite colour is purple now", 3),
        hit(5, "The retro is at 15:00", 2),
    ]
    order, newer = newer_first(page, lambda h: h)
    assert [h.key for h in order] == ["k3", "k2", "k4", "k1", "k5"]
    assert newer == {4: "k3", 1: "k3"}
    same = [hit(1, "The standup is at 9:30", 1), hit(2, "the standup is at 9:30", 2)]
    assert newer_first(same, lambda h: h) == (same, {})
