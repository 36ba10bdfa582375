"""Snapshots of working memory (issue 35, item 3): taken from the mirror, restored through the
write protocol so that working memory (Redis, and its mirror) is exactly the snapshot's again;
real PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from sqlalchemy import text

from tests.working_memory.test_api_working_memory import add, set_budget

PROBLEM = "application/problem+json"


async def wm(client: httpx.AsyncClient, robot: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    assert r.json()["degraded"] is False
    return r.json()["items"]


async def mirror(client: httpx.AsyncClient, robot: str) -> list[tuple]:
    """The robot's mirror rows in working memory: key, added, last access, origin, tokens."""
    c = client.app.state.components
    async with c.sessionmaker() as s:
        rows = await s.execute(
            text("""
            SELECT m.key, w.added_at, w.last_access_at, w.from_recall, m.token_count
            FROM working_memory_item w
            JOIN robot r ON r.id = w.robot_id
            JOIN namespace n ON n.id = r.namespace_id
            JOIN memory m ON m.id = w.memory_id AND m.created_at = w.memory_created_at
            WHERE n.name = :ns AND r.name = :robot AND w.in_working_memory
            ORDER BY m.key"""),
            {"ns": client.headers["X-Namespace"], "robot": robot},
        )
        return [tuple(r) for r in rows]


async def recall(client: httpx.AsyncClient, robot: str, query: str) -> list[str]:
    r = await client.post(
        f"/v1/robots/{robot}/recall", json={"query": query, "strategy": "fulltext", "limit": 5}
    )
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


async def snapshot(client: httpx.AsyncClient, robot: str, **body: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/robots/{robot}/snapshots", json=body or None)
    assert r.status_code == 201, r.text
    return r.json()


async def test_a_restore_gives_back_working_memory_exactly_as_snapshotted(client) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "ann", "b", 7, 1, "beta")
    await add(client, "ann", "c", 4, 3, "gamma")
    await add(client, "bob", "z", 6, 9, "zebra")  # bob's, into ann's working memory by recall
    assert await recall(client, "ann", "zebra") == ["z"]
    before, rows_before = await wm(client, "ann"), await mirror(client, "ann")
    assert [i["key"] for i in before] == ["b", "a", "c", "z"]

    s = await snapshot(client, "ann", name="before the trip")
    assert (s["robot"], s["name"], s["item_count"], s["tokens"]) == (
        "ann", "before the trip", 4, 22,
    )  # fmt: skip

    # Working memory changes every way it can: adds, a recall, a retrieve, a clear, adds.
    await add(client, "ann", "d", 8, 5, "delta")
    assert await recall(client, "ann", "alpha") == ["a"]
    assert (await client.get("/v1/robots/ann/memories/b")).status_code == 200
    assert (await client.delete("/v1/robots/ann/working-memory")).json()["removed"] == 5
    await add(client, "ann", "e", 3, 2, "epsilon")
    assert [i["key"] for i in await wm(client, "ann")] == ["e"]

    r = await client.post(f"/v1/robots/ann/snapshots/{s['id']}/restore")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "id": s["id"], "robot": "ann", "restored": ["b", "a", "c", "z"], "skipped": [],
        "withheld": 0,
        "evicted": [], "tokens": 22,
    }  # fmt: skip
    assert await wm(client, "ann") == before  # keys, order, tokens, times, origin
    assert await mirror(client, "ann") == rows_before

    detail = (await client.get(f"/v1/robots/ann/snapshots/{s['id']}")).json()
    assert [(i["key"], i["tokens"], i["version"], i["from_recall"]) for i in detail["items"]] == [
        ("b", 7, 1, False), ("a", 5, 1, False), ("c", 4, 1, False), ("z", 6, 1, True),
    ]  # fmt: skip
    assert detail["readable"] == 4  # every current memory of the namespace then: a b c z


async def test_a_restore_skips_what_was_forgotten_or_superseded_since(client) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "ann", "b", 7, 1, "beta")
    await add(client, "ann", "c", 4, 3, "gamma")
    await add(client, "ann", "d", 2, 9, "dust")
    s = await snapshot(client, "ann")
    assert (s["name"], s["item_count"], s["tokens"]) == (None, 4, 18)
    assert (await client.delete("/v1/robots/ann/memories/b")).status_code == 200
    r = await client.delete("/v1/robots/ann/memories/d", params={"hard": True, "confirm": "d"})
    assert r.status_code == 200
    r = await client.post(
        "/v1/robots/ann/memories", json={"key": "c2", "content": "gamma two", "supersedes": ["c"]}
    )
    assert r.status_code == 201, r.text
    assert [i["key"] for i in await wm(client, "ann")] == ["c2", "a"]

    r = await client.post(f"/v1/robots/ann/snapshots/{s['id']}/restore")
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == ["a"]
    assert r.json()["skipped"] == [  # in the snapshot's order
        {"key": "b", "reason": "forgotten"},
        {"key": "c", "reason": "superseded"},
        {"key": "d", "reason": "forgotten"},  # hard-deleted
    ]
    assert [i["key"] for i in await wm(client, "ann")] == ["a"]
    assert [row[0] for row in await mirror(client, "ann")] == ["a"]


async def test_a_restore_counts_a_memory_the_robot_may_no_longer_read_without_naming_it(
    client,
) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    r = await client.post(
        "/v1/robots/bob/memories",
        json={"key": "p", "content": "zephyr plans", "visibility": "private", "readers": ["ann"]},
    )
    assert r.status_code == 201, r.text
    assert await recall(client, "ann", "zephyr") == ["p"]
    s = await snapshot(client, "ann")
    assert s["item_count"] == 2
    body = {"content": "zephyr plans", "visibility": "private", "readers": []}
    assert (await client.put("/v1/robots/bob/memories/p", json=body)).status_code == 200
    r = await client.post(f"/v1/robots/ann/snapshots/{s['id']}/restore")
    assert r.status_code == 200, r.text
    assert (r.json()["restored"], r.json()["skipped"], r.json()["withheld"]) == (["a"], [], 1)
    assert [i["key"] for i in await wm(client, "ann")] == ["a"]


async def test_a_snapshot_name_too_long_is_422_counting_characters(client) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    r = await client.post("/v1/robots/ann/snapshots", json={"name": "n" * 100_000})
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM)
    assert [(e["field"], e["message"]) for e in r.json()["errors"]] == [
        ("body.name", "String should have at most 200 characters")
    ]
    assert (await client.get("/v1/robots/ann/snapshots")).json() == []


async def test_the_budget_still_applies_to_a_restore(client) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "ann", "b", 7, 1, "beta")
    await add(client, "ann", "c", 4, 3, "gamma")
    s = await snapshot(client, "ann")
    await set_budget(client, "ann", 10)  # evicts b (lowest importance) now
    r = await client.post(f"/v1/robots/ann/snapshots/{s['id']}/restore")
    assert r.status_code == 200, r.text
    assert (r.json()["restored"], r.json()["evicted"], r.json()["tokens"]) == (["a", "c"], ["b"], 9)
    assert [i["key"] for i in await wm(client, "ann")] == ["a", "c"]
    assert [row[0] for row in await mirror(client, "ann")] == ["a", "c"]


async def test_snapshots_are_listed_read_and_deleted_per_robot(client, app_factory) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "bob", "b", 7, 1, "beta")
    s1 = await snapshot(client, "ann", name="one")
    s2 = await snapshot(client, "ann")
    sb = await snapshot(client, "bob")
    listed = (await client.get("/v1/robots/ann/snapshots")).json()
    assert [(x["id"], x["name"], x["item_count"]) for x in listed] == [
        (s1["id"], "one", 1), (s2["id"], None, 1),
    ]  # fmt: skip
    # Another robot's snapshot, or one that does not exist: 404, as problem+json.
    for method, path in [
        ("GET", f"/v1/robots/ann/snapshots/{sb['id']}"),
        ("DELETE", f"/v1/robots/ann/snapshots/{sb['id']}"),
        ("POST", f"/v1/robots/ann/snapshots/{sb['id']}/restore"),
        ("GET", "/v1/robots/ann/snapshots/999999999"),
        ("POST", "/v1/robots/ann/snapshots/999999999/restore"),
        ("GET", "/v1/robots/nobody/snapshots"),
        ("POST", "/v1/robots/nobody/snapshots"),
    ]:
        r = await client.request(method, path)
        assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM), (path, r.text)
    # Another namespace sees none of them, even under the same robot names.
    async with app_factory() as other:
        other.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        await add(other, "ann", "a", 5, 3, "alpha")
        assert (await other.get("/v1/robots/ann/snapshots")).json() == []
        r = await other.get(f"/v1/robots/ann/snapshots/{s1['id']}")
        assert r.status_code == 404
        r = await other.post(f"/v1/robots/ann/snapshots/{s1['id']}/restore")
        assert r.status_code == 404
    r = await client.delete(f"/v1/robots/ann/snapshots/{s1['id']}")
    assert (r.status_code, r.json()["id"]) == (200, s1["id"])
    assert [x["id"] for x in (await client.get("/v1/robots/ann/snapshots")).json()] == [s2["id"]]
    assert (await client.get(f"/v1/robots/ann/snapshots/{s1['id']}")).status_code == 404
    bad = await client.post("/v1/robots/ann/snapshots", json={"name": ""})
    assert bad.status_code == 422
    assert [x["id"] for x in (await client.get("/v1/robots/ann/snapshots")).json()] == [s2["id"]]


async def test_a_restore_while_redis_is_unreachable_is_a_503_and_changes_nothing(client) -> None:
    await add(client, "ann", "a", 5, 3, "alpha")
    s = await snapshot(client, "ann")
    await add(client, "ann", "b", 7, 1, "beta")
    before = await mirror(client, "ann")
    breaker = client.app.state.components.two_tier.breaker
    breaker.trip()
    try:
        r = await client.post(f"/v1/robots/ann/snapshots/{s['id']}/restore")
        assert (r.status_code, r.headers["content-type"]) == (503, PROBLEM)
        assert await mirror(client, "ann") == before
    finally:
        breaker.reset()
    assert [i["key"] for i in await wm(client, "ann")] == ["b", "a"]
