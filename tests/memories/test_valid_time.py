"""Valid time (issue 33): current memories by default, `valid_at` as an instant or a
timeframe, `include=superseded`, both axes with `as_of`, and bad validity refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

PROBLEM = "application/problem+json"
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
FACTS = [  # key, content, valid_from, valid_to
    ("lisbon", "Ana lives in Lisbon", "2025-01-01T00:00:00Z", "2026-03-01T00:00:00Z"),
    ("berlin", "Ana lives in Berlin", "2026-03-01T00:00:00Z", None),
    ("paris", "Ana lives in Paris", "2027-01-01T00:00:00Z", None),
]


@pytest.fixture
async def facts(client):
    client.app.state.components.clock.set(lambda: NOW)
    for key, content, start, end in FACTS:
        body = {"key": key, "content": content, "valid_from": start, "valid_to": end}
        r = await client.post("/v1/robots/a/memories", json=body)
        assert r.status_code == 201, r.text
        assert (r.json()["valid_from"], r.json()["valid_to"]) == (start, end)
    return client


async def listed(client, **params) -> list[str]:
    r = await client.get("/v1/robots/a/memories", params=params)
    assert r.status_code == 200, r.text
    return sorted(m["key"] for m in r.json()["items"])


async def recalled(client, **extra) -> list[str]:
    body = {"query": "Ana lives", "strategy": "fulltext", "load_into_working_memory": False}
    r = await client.post("/v1/robots/a/recall", json={**body, **extra})
    assert r.status_code == 200, r.text
    return sorted(h["key"] for h in r.json()["hits"])


async def test_reads_are_current_by_default(facts) -> None:
    assert await listed(facts) == ["berlin"]
    assert await recalled(facts) == ["berlin"]


@pytest.mark.parametrize(
    ("valid_at", "keys"),
    [
        ("2025-06-01T00:00:00Z", ["lisbon"]),
        ("2026-02-28", ["lisbon"]),  # that whole day
        ("2026-03-01", ["berlin"]),  # lisbon ended at its first instant
        ("2026-02-01/2026-04-01", ["berlin", "lisbon"]),  # true at some instant of it
        ("2027-06-01T00:00:00Z", ["berlin", "paris"]),
        ("last year", ["lisbon"]),  # 2025, from the frozen clock
        ("2024-01-01", []),
    ],
)
async def test_valid_at_reads_what_was_true_then(facts, valid_at: str, keys: list[str]) -> None:
    assert await listed(facts, valid_at=valid_at) == keys
    assert await recalled(facts, valid_at=valid_at) == keys


async def test_include_superseded_reads_every_memory(facts) -> None:
    assert await listed(facts, include="superseded") == ["berlin", "lisbon", "paris"]
    assert await recalled(facts, include=["superseded"]) == ["berlin", "lisbon", "paris"]


async def test_a_memory_without_valid_from_is_true_from_its_created_at(client) -> None:
    client.app.state.components.clock.set(lambda: NOW)
    body = {"key": "old", "content": "Ana lives in Rome", "created_at": "2026-01-10T00:00:00Z"}
    assert (await client.post("/v1/robots/a/memories", json=body)).status_code == 201
    assert await listed(client, valid_at="2026-01-09") == []
    assert await listed(client, valid_at="2026-01-10") == ["old"]
    assert await listed(client) == ["old"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"valid_at": "someday soon"}, "query.valid_at"),
        ({"valid_at": "2026-01-01", "include": "superseded"}, "query.valid_at"),
        ({"include": "everything"}, "query.include.0"),
    ],
)
async def test_a_bad_validity_read_is_422_naming_its_field(client, params, field) -> None:
    r = await client.get("/v1/robots/a/memories", params=params)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    assert field in [e["field"] for e in r.json()["errors"]]
    recall = {"query": "x", **{k: [v] if k == "include" else v for k, v in params.items()}}
    r = await client.post("/v1/robots/a/recall", json=recall)
    assert r.status_code == 422, r.text


async def count(client, ns: str) -> int:
    async with client.app.state.components.sessionmaker() as s:
        return (
            await s.execute(
                text(
                    "SELECT count(*) FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                    "WHERE n.name = :ns"
                ),
                {"ns": ns},
            )
        ).scalar_one()


@pytest.mark.parametrize(
    "body",
    [
        {"valid_from": "2026-05-01T00:00:00Z", "valid_to": "2026-05-01T00:00:00Z"},
        {"valid_from": "2026-05-01T00:00:00Z", "valid_to": "2026-04-01T00:00:00Z"},
        {"created_at": "2026-05-01T00:00:00Z", "valid_to": "2026-04-01T00:00:00Z"},
        {"valid_to": "2020-01-01T00:00:00Z"},  # before the memory's start, now
    ],
)
async def test_validity_that_ends_before_it_starts_is_422_and_writes_nothing(
    client, ns, body
) -> None:
    r = await client.post("/v1/robots/a/memories", json={"content": "x", **body})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    r = await client.put("/v1/robots/a/memories/k", json={"content": "x", **body})
    assert r.status_code == 422, r.text
    assert await count(client, ns) == 0


async def test_as_of_and_valid_at_together_read_what_was_believed_then_about_a_time(
    client,
) -> None:
    """Transaction time (`as_of`, the versions) and valid time, in one statement: before
    the supersede, lisbon was believed open-ended, so "true in June" then meant lisbon."""
    r = await client.post(
        "/v1/robots/a/memories",
        json={
            "key": "home",
            "content": "Ana lives in Lisbon",
            "valid_from": "2025-01-01T00:00:00Z",
        },
    )
    believed = r.json()["updated_at"]
    r = await client.post(
        "/v1/robots/a/memories",
        json={
            "key": "home@2",
            "content": "Ana lives in Berlin",
            "valid_from": "2026-03-01T00:00:00Z",
            "supersedes": ["home"],
        },
    )
    assert r.status_code == 201, r.text
    june = "2026-06-01"
    assert await listed(client, valid_at=june) == ["home@2"]
    assert await listed(client, valid_at=june, as_of=believed) == ["home"]
    assert await listed(client, valid_at="2025-06-01", as_of=believed) == ["home"]
    assert await listed(client, valid_at="2025-06-01") == ["home"]
    # Believed at `believed`, every validity: only home existed.
    assert await listed(client, include="superseded", as_of=believed) == ["home"]
    r = await client.get("/v1/robots/a/memories", params={"as_of": believed})
    [home] = r.json()["items"]
    assert (home["version"], home["valid_to"], home["superseded_by"]) == (1, None, None)
