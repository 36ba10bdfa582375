"""Near-duplicates on add (`dedupe`): no new row, the existing memory reinforced and named in
`duplicate_of`; exact and semantic matching, batches, the deployment default, concurrency."""

from __future__ import annotations

import asyncio
import math

from sqlalchemy import text

PROBLEM = "application/problem+json"
DIM = 384


def vec(cos: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine similarity to vec(1.0) is `cos`, turned towards `axis`
    (vectors turned towards different axes are nearer vec(1.0) than each other)."""
    v = [0.0] * DIM
    v[0], v[axis] = cos, math.sqrt(max(0.0, 1 - cos * cos))
    return v


async def stored(client, ns: str) -> list[tuple[str, str, bool]]:
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text(
                "SELECT m.key, m.content, m.deleted_at IS NULL FROM memory m "
                "JOIN namespace n ON n.id = m.namespace_id WHERE n.name = :ns ORDER BY m.id"
            ),
            {"ns": ns},
        )
        return [tuple(r) for r in rows]


async def test_an_exact_duplicate_reinforces_the_memory_and_stores_nothing(client, ns) -> None:
    first = await client.post(
        "/v1/robots/a/memories",
        json={"key": "a1", "content": "The deploy is on Friday", "importance": 2, "tags": ["x"]},
    )
    assert first.status_code == 201
    assert first.json()["duplicate_of"] is None
    r = await client.post(
        "/v1/robots/b/memories",
        json={
            "key": "a2",
            "content": "The deploy is on Friday",
            "importance": 5,
            "tags": ["y", "x"],
            "dedupe": "exact",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["key"], body["duplicate_of"], body["created"]) == ("a1", "a1", False)
    assert (body["importance"], body["tags"], body["version"]) == (5, ["x", "y"], 2)
    assert (body["access_count"], body["author"]) == (1, "a")
    assert body["last_accessed_at"] is not None
    assert body["working_memory"]["admitted"] is True
    assert await stored(client, ns) == [("a1", "The deploy is on Friday", True)]
    assert (await client.get("/v1/robots/a/memories/a2")).status_code == 404
    got = (await client.get("/v1/robots/a/memories/a1")).json()
    assert (got["importance"], got["tags"], got["access_count"]) == (5, ["x", "y"], 1)
    # The adder's working memory now holds it; the version history shows who reinforced it.
    items = (await client.get("/v1/robots/b/working-memory")).json()["items"]
    assert [i["key"] for i in items] == ["a1"]
    versions = (await client.get("/v1/robots/a/memories/a1/versions")).json()["versions"]
    assert [(v["version"], v["importance"], v["changed_by"]) for v in versions] == [
        (2, 5, "b"),
        (1, 2, "a"),
    ]


async def test_a_reinforcement_that_changes_no_field_writes_no_version(client, ns) -> None:
    await client.post(
        "/v1/robots/a/memories",
        json={"key": "a1", "content": "same", "importance": 4, "tags": ["x", "y"]},
    )
    for n in (1, 2):
        r = await client.post(
            "/v1/robots/a/memories",
            json={"content": "same", "importance": 1, "tags": ["y"], "dedupe": "exact"},
        )
        assert r.status_code == 200
        body = r.json()
        assert (body["version"], body["importance"], body["tags"]) == (1, 4, ["x", "y"])
        assert body["access_count"] == n


async def test_exact_needs_the_same_type_and_content_and_a_live_memory(client, ns) -> None:
    await client.post("/v1/robots/a/memories", json={"key": "a1", "content": "c"})
    await client.post("/v1/robots/a/memories", json={"key": "d1", "content": "gone"})
    await client.delete("/v1/robots/a/memories/d1")
    cases = [
        ({"key": "k1", "content": "c", "type": "preference"}, 201, None),
        ({"key": "k2", "content": "c "}, 201, None),
        ({"key": "k3", "content": "gone"}, 201, None),
        ({"key": "k4", "content": "c"}, 200, "a1"),
        ({"key": "k5", "content": "c", "type": "preference"}, 200, "k1"),
    ]
    for body, status, duplicate_of in cases:
        r = await client.post("/v1/robots/a/memories", json={**body, "dedupe": "exact"})
        assert (r.status_code, r.json()["duplicate_of"]) == (status, duplicate_of), body
    assert [k for k, _, _ in await stored(client, ns)] == ["a1", "d1", "k1", "k2", "k3"]


async def test_semantic_matches_at_the_threshold_and_only_within_the_type(client, ns) -> None:
    await client.post(
        "/v1/robots/a/memories", json={"key": "a1", "content": "base", "embedding": vec(1.0)}
    )

    async def add(key: str, cos: float, axis: int = 1, **extra) -> tuple[int, str | None]:
        r = await client.post(
            "/v1/robots/a/memories",
            json={
                "key": key,
                "content": key,
                "embedding": vec(cos, axis),
                "dedupe": "semantic",
                **extra,
            },
        )
        return r.status_code, r.json()["duplicate_of"]

    assert await add("k1", 0.95) == (200, "a1")
    assert await add("k2", 0.90) == (201, None)  # below the default 0.92
    assert await add("k3", 0.95, type="decision") == (201, None)
    assert await add("k4", 0.85, axis=2, dedupe_threshold=0.8) == (200, "a1")
    assert await add("k5", 0.91, dedupe_threshold=0.95) == (200, "k2")  # k2 is nearer: 0.9999
    # exact content counts under semantic too, whatever the vectors
    r = await client.post(
        "/v1/robots/a/memories",
        json={"content": "base", "embedding": vec(0.0), "dedupe": "semantic"},
    )
    assert (r.status_code, r.json()["duplicate_of"]) == (200, "a1")
    assert [k for k, _, _ in await stored(client, ns)] == ["a1", "k2", "k3"]


async def test_a_batch_deduplicates_against_stored_memories_and_itself(client, ns) -> None:
    await client.post("/v1/robots/a/memories", json={"key": "a1", "content": "old"})
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={
            "memories": [
                {"key": "n1", "content": "new", "tags": ["p"], "dedupe": "exact"},
                {"key": "n2", "content": "old", "importance": 3, "dedupe": "exact"},
                {"key": "n3", "content": "new", "tags": ["q"], "importance": 6, "dedupe": "exact"},
                {"key": "n4", "content": "other", "dedupe": "exact"},
                {"key": "n5", "content": "old", "tags": ["r"], "dedupe": "exact"},
            ]
        },
    )
    assert r.status_code == 201, r.text
    got = [
        (m["key"], m["duplicate_of"], m["created"], m["importance"], m["tags"])
        for m in r.json()["memories"]
    ]
    assert got == [
        ("n1", None, True, 6, ["p", "q"]),
        ("a1", "a1", False, 3, ["r"]),
        ("n1", "n1", False, 6, ["p", "q"]),
        ("n4", None, True, 1, []),
        ("a1", "a1", False, 3, ["r"]),
    ]
    assert r.json()["memories"][1]["access_count"] == 2
    assert [k for k, _, _ in await stored(client, ns)] == ["a1", "n1", "n4"]


async def test_the_deployment_default_applies_unless_the_add_says_otherwise(app_factory, ns):
    async with app_factory(dedupe="exact") as client:
        client.headers["X-Namespace"] = ns
        await client.post("/v1/robots/a/memories", json={"key": "a1", "content": "c"})
        r = await client.post("/v1/robots/a/memories", json={"key": "a2", "content": "c"})
        assert (r.status_code, r.json()["duplicate_of"]) == (200, "a1")
        r = await client.post(
            "/v1/robots/a/memories", json={"key": "a3", "content": "c", "dedupe": "off"}
        )
        assert (r.status_code, r.json()["duplicate_of"]) == (201, None)
        assert [k for k, _, _ in await stored(client, ns)] == ["a1", "a3"]


async def test_concurrent_duplicates_create_exactly_one_memory(app_factory, ns) -> None:
    async with app_factory(db_pool_size=10) as client:
        client.headers["X-Namespace"] = ns
        answers = await asyncio.gather(
            *(
                client.post(
                    f"/v1/robots/r{i}/memories",
                    json={"content": "the same fact", "dedupe": "semantic", "embedding": vec(1)},
                )
                for i in range(8)
            )
        )
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [200] * 7 + [201]
        created = next(a.json()["key"] for a in answers if a.status_code == 201)
        assert {a.json()["key"] for a in answers} == {created}
        assert await stored(client, ns) == [(created, "the same fact", True)]
        got = (await client.get(f"/v1/robots/r0/memories/{created}")).json()
        assert got["access_count"] == 7


async def test_bad_dedupe_fields_are_422_and_write_nothing(client, ns) -> None:
    for extra in (
        {"dedupe": "fuzzy"},
        {"dedupe": True},
        {"dedupe_threshold": 0},
        {"dedupe_threshold": 1.5},
        {"dedupe_threshold": "high"},
    ):
        r = await client.post("/v1/robots/a/memories", json={"content": "c", **extra})
        assert r.status_code == 422, extra
        assert r.headers["content-type"] == PROBLEM
    assert await stored(client, ns) == []
    assert (await client.get("/v1/robots")).json() == []
