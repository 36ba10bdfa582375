"""Retention that archives (issue 33): policies in and out, bad ones refused, a dry run that
changes nothing, a run that archives exactly what each policy names through the write
protocol (holders let go), restore, and a second run that finds nothing more."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from tests.working_memory.tiers import disagreements

PROBLEM = "application/problem+json"
NOW = datetime(2027, 1, 1, tzinfo=UTC)
OLD = "2026-01-01T00:00:00Z"
POLICIES = [
    {"rule": "superseded", "days": 30},
    {"type": "note", "rule": "idle", "days": 180},
    {"rule": "stale", "days": 90, "threshold": 0.8},
]


async def add(client, robot: str = "a", **body) -> None:
    r = await client.post(f"/v1/robots/{robot}/memories", json=body)
    assert r.status_code == 201, r.text


@pytest.fixture
async def seeded(client):
    """As of NOW: old-note idle 365 days (a note); old-fact staleness 1 × 0.9 / 1 = 0.9;
    important 1 × 0.1 = 0.1; recent (12 days, importance 0) 0.133; accessed (read at NOW)
    0; home superseded 214 days ago (and stale 0.9 too: the first policy takes it); home@2
    added today, 36 days before NOW: 0.4 × 0.9 = 0.36."""
    await add(client, key="old-note", content="Call the plumber", type="note", created_at=OLD)
    # b adds it, so holds it in its working memory (an add is no access)
    await add(client, "b", key="old-fact", content="The wifi password is on the fridge",
              created_at=OLD)  # fmt: skip
    await add(client, key="important", content="Ana is allergic to nuts", importance=9,
              created_at=OLD)  # fmt: skip
    await add(client, key="recent", content="Lunch was pasta", importance=0,
              created_at="2026-12-20T00:00:00Z")  # fmt: skip
    await add(client, key="accessed", content="The car is blue", created_at=OLD)
    await add(client, key="home", content="Ana lives in Lisbon", created_at=OLD)
    await add(client, key="home@2", content="Ana lives in Berlin",
              valid_from="2026-06-01T00:00:00Z", supersedes=["home"])  # fmt: skip
    items = (await client.get("/v1/robots/b/working-memory")).json()["items"]
    assert [i["key"] for i in items] == ["old-fact"]
    client.app.state.components.clock.set(lambda: NOW)
    assert (await client.get("/v1/robots/c/memories/accessed")).status_code == 200
    await client.app.state.components.access.flush()
    r = await client.put("/v1/retention", json={"policies": POLICIES})
    assert r.status_code == 200, r.text
    return client


def keys_of(run: dict) -> list[tuple[str, list[str]]]:
    return [(o["policy"]["rule"], o["keys"]) for o in run["policies"]]


async def live(client) -> list[str]:
    r = await client.get("/v1/robots/x/memories", params={"include": "superseded"})
    return sorted(m["key"] for m in r.json()["items"])


EXPECTED = [("superseded", ["home"]), ("idle", ["old-note"]), ("stale", ["old-fact"])]
ALL = ["accessed", "home", "home@2", "important", "old-fact", "old-note", "recent"]


async def test_policies_round_trip_with_the_stale_default(client) -> None:
    assert (await client.get("/v1/retention")).json() == {"policies": []}
    body = {
        "policies": [{"rule": "stale", "days": 30}, {"type": "note", "rule": "idle", "days": 9}]
    }
    r = await client.put("/v1/retention", json=body)
    assert r.status_code == 200, r.text
    want = [
        {"type": None, "rule": "stale", "days": 30, "threshold": 0.9},
        {"type": "note", "rule": "idle", "days": 9, "threshold": None},
    ]
    assert r.json()["policies"] == want
    assert (await client.get("/v1/retention")).json()["policies"] == want
    assert (await client.put("/v1/retention", json={"policies": []})).status_code == 200
    assert (await client.get("/v1/retention")).json() == {"policies": []}


@pytest.mark.parametrize(
    "policies",
    [
        [{"rule": "idle", "days": 30, "threshold": 0.5}],  # threshold is the stale rule's
        [{"rule": "idle", "days": 0}],
        [{"rule": "stale", "days": 30, "threshold": 1.5}],
        [{"rule": "forget", "days": 30}],
        [{"rule": "idle", "days": 30}, {"rule": "idle", "days": 60}],  # one per rule and type
        [{"rule": "idle", "days": d} for d in range(1, 22)],  # at most 20
    ],
)
async def test_a_bad_policy_is_422_and_changes_nothing(client, policies) -> None:
    await client.put("/v1/retention", json={"policies": [{"rule": "superseded", "days": 7}]})
    r = await client.put("/v1/retention", json={"policies": policies})
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), r.text
    assert (await client.get("/v1/retention")).json()["policies"] == [
        {"type": None, "rule": "superseded", "days": 7, "threshold": None}
    ]


async def test_a_dry_run_lists_what_each_policy_would_archive_and_changes_nothing(
    seeded,
) -> None:
    r = await seeded.post("/v1/retention/run", json={"dry_run": True})
    assert r.status_code == 200, r.text
    assert (r.json()["dry_run"], r.json()["archived"]) == (True, 0)
    assert keys_of(r.json()) == EXPECTED
    assert await live(seeded) == ALL


async def test_a_run_archives_exactly_those_through_the_write_protocol(seeded, ns) -> None:
    r = await seeded.post("/v1/retention/run", json={})
    assert r.status_code == 200, r.text
    assert (r.json()["archived"], keys_of(r.json())) == (3, EXPECTED)
    assert await live(seeded) == ["accessed", "home@2", "important", "recent"]
    # b let old-fact go, and the tiers agree
    items = (await seeded.get("/v1/robots/b/working-memory")).json()["items"]
    assert items == []
    assert await disagreements(seeded, ["a", "b"]) == {}
    r = await seeded.get("/v1/robots/a/memories/old-fact", params={"include_deleted": "true"})
    assert (r.json()["archived"], r.json()["deleted_at"] is not None) == ("stale", True)
    hits = await seeded.post("/v1/robots/a/recall", json={"query": "wifi", "strategy": "fulltext"})
    assert hits.json()["hits"] == []
    # nothing was deleted: every row is still there
    async with seeded.app.state.components.sessionmaker() as s:
        n = (
            await s.execute(
                text(
                    "SELECT count(*) FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                    "WHERE n.name = :ns"
                ),
                {"ns": ns},
            )
        ).scalar_one()
    assert n == len(ALL)
    # a second run finds nothing more
    again = (await seeded.post("/v1/retention/run", json={})).json()
    assert (again["archived"], keys_of(again)) == (0, [(r, []) for r, _ in EXPECTED])
    # restore brings one back, current and unarchived
    r = await seeded.post("/v1/robots/a/memories/old-fact/restore")
    assert (r.status_code, r.json()["archived"], r.json()["deleted_at"]) == (200, None, None)
    hits = await seeded.post("/v1/robots/a/recall", json={"query": "wifi", "strategy": "fulltext"})
    assert [h["key"] for h in hits.json()["hits"]] == ["old-fact"]


async def test_the_worker_runs_each_namespace_s_policies(seeded) -> None:
    archived = await seeded.app.state.components.retention_worker.run_once()
    assert archived >= 3  # this namespace's three (other tests' namespaces may add theirs)
    assert await live(seeded) == ["accessed", "home@2", "important", "recent"]
