"""Versions: a replace keeps the previous version; history newest first, as_of, restore
through the write protocol, hard delete removing every version."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text

PROBLEM = "application/problem+json"


async def versions(client, key: str, **params) -> list[tuple]:
    r = await client.get(f"/v1/robots/a/memories/{key}/versions", params=params)
    assert r.status_code == 200, r.text
    assert r.json()["key"] == key
    return [
        (v["version"], v["content"], v["importance"], v["changed_by"], v["current"])
        for v in r.json()["versions"]
    ]


async def working_memory(client, robot: str) -> dict[str, str]:
    items = (await client.get(f"/v1/robots/{robot}/working-memory")).json()["items"]
    return {i["key"]: i["content"] for i in items}


async def recalled(client, robot: str, query: str) -> list[str]:
    r = await client.post(
        f"/v1/robots/{robot}/recall", json={"query": query, "strategy": "fulltext"}
    )
    assert r.status_code == 200, r.text
    return [h["content"] for h in r.json()["hits"]]


async def version_rows(client, ns: str) -> int:
    async with client.app.state.components.sessionmaker() as s:
        return (
            await s.execute(
                text(
                    "SELECT count(*) FROM memory_version v "
                    "JOIN memory_key k ON k.memory_id = v.memory_id "
                    "JOIN namespace n ON n.id = k.namespace_id WHERE n.name = :ns"
                ),
                {"ns": ns},
            )
        ).scalar_one()


async def test_replaces_keep_each_previous_version_newest_first_with_who_and_when(
    client,
) -> None:
    assert (await client.put("/v1/robots/a/memories/k", json={"content": "one"})).status_code == 201
    await client.put("/v1/robots/a/memories/k", json={"content": "one"})  # unchanged: no version
    await client.put("/v1/robots/b/memories/k", json={"content": "two", "importance": 2})
    await client.put("/v1/robots/c/memories/k", json={"content": "two", "importance": 3})
    assert await versions(client, "k") == [
        (3, "two", 3, "c", True),
        (2, "two", 2, "b", False),
        (1, "one", 1, "a", False),
    ]
    body = (await client.get("/v1/robots/a/memories/k/versions")).json()["versions"]
    created_at = (await client.get("/v1/robots/a/memories/k")).json()["created_at"]
    assert body[2]["changed_at"] == created_at  # version 1: written when added
    times = [datetime.fromisoformat(v["changed_at"]) for v in body]
    assert times == sorted(times, reverse=True)
    assert await versions(client, "k", limit=1) == [(3, "two", 3, "c", True)]
    assert await versions(client, "k", before=3, limit=1) == [(2, "two", 2, "b", False)]
    assert await versions(client, "k", before=2) == [(1, "one", 1, "a", False)]


async def test_as_of_returns_the_version_current_at_that_instant(client) -> None:
    await client.put("/v1/robots/a/memories/k", json={"content": "one", "tags": ["x"]})
    await client.put("/v1/robots/a/memories/k", json={"content": "two words", "tags": ["y"]})
    await client.put("/v1/robots/a/memories/k", json={"content": "three"})
    listed = (await client.get("/v1/robots/a/memories/k/versions")).json()["versions"]
    at = {v["version"]: datetime.fromisoformat(v["changed_at"]) for v in listed}

    async def as_of(instant: datetime) -> tuple:
        r = await client.get("/v1/robots/a/memories/k", params={"as_of": instant.isoformat()})
        if r.status_code != 200:
            return (r.status_code,)
        m = r.json()
        return (m["version"], m["content"], m["tags"], m["token_count"])

    tick = timedelta(microseconds=1)
    assert await as_of(at[1] - tick) == (404,)
    assert await as_of(at[1]) == (1, "one", ["x"], 1)
    assert await as_of(at[2] - tick) == (1, "one", ["x"], 1)
    assert await as_of(at[2]) == (2, "two words", ["y"], 2)
    assert await as_of(at[3]) == (3, "three", [], 1)
    assert await as_of(at[3] + timedelta(days=1)) == (3, "three", [], 1)
    # Without as_of, the current version.
    assert (await client.get("/v1/robots/a/memories/k")).json()["content"] == "three"


async def test_restore_makes_an_old_version_current_again_through_the_write_protocol(
    client,
) -> None:
    await client.put("/v1/robots/a/memories/k", json={"content": "alpha note", "importance": 4})
    assert await recalled(client, "b", "alpha") == ["alpha note"]  # b holds it now
    r = await client.put("/v1/robots/a/memories/k", json={"content": "beta note"})
    assert r.json()["version"] == 2
    assert await working_memory(client, "a") == {"k": "beta note"}
    assert await working_memory(client, "b") == {}  # withdrawn by the replace

    r = await client.post("/v1/robots/b/memories/k/versions/1/restore")
    assert r.status_code == 200, r.text
    restored = r.json()
    assert (restored["version"], restored["content"], restored["importance"]) == (
        3,
        "alpha note",
        4,
    )
    assert restored["embedding_status"] == "pending"  # new content: embedded again
    assert restored["working_memory"] == {"admitted": True, "reason": "admitted", "evicted": []}
    assert await working_memory(client, "b") == {"k": "alpha note"}
    assert await working_memory(client, "a") == {}  # the replaced copy is withdrawn
    assert await recalled(client, "c", "beta") == []  # recall only sees the current version
    assert await recalled(client, "c", "alpha") == ["alpha note"]
    assert await versions(client, "k") == [
        (3, "alpha note", 4, "b", True),
        (2, "beta note", 1, "a", False),
        (1, "alpha note", 4, "a", False),
    ]

    # Restoring the current version changes nothing.
    r = await client.post("/v1/robots/b/memories/k/versions/3/restore")
    assert (r.status_code, r.json()["version"]) == (200, 3)
    assert len(await versions(client, "k")) == 3


async def test_soft_delete_keeps_versions_and_a_hard_delete_removes_them_all(client, ns) -> None:
    for content in ("one", "two", "three"):
        await client.put("/v1/robots/a/memories/k", json={"content": content})
    assert await version_rows(client, ns) == 2
    await client.delete("/v1/robots/a/memories/k")
    r = await client.get("/v1/robots/a/memories/k/versions")
    assert r.status_code == 404
    assert [v[0] for v in await versions(client, "k", include_deleted="true")] == [3, 2, 1]
    r = await client.delete("/v1/robots/a/memories/k", params={"hard": "true", "confirm": "k"})
    assert r.status_code == 200
    assert await version_rows(client, ns) == 0
    await client.put("/v1/robots/a/memories/k", json={"content": "new life"})
    assert await versions(client, "k") == [(1, "new life", 1, "a", True)]


async def test_bad_version_requests_are_4xx_problem_json_and_write_nothing(client, ns) -> None:
    await client.put("/v1/robots/a/memories/k", json={"content": "one"})
    await client.put("/v1/robots/a/memories/k", json={"content": "two"})
    cases = [
        (client.get("/v1/robots/a/memories/k", params={"as_of": "yesterday-ish"}), 422),
        (client.get("/v1/robots/a/memories/k", params={"as_of": "2026-01-01T00:00:00"}), 422),
        (client.get("/v1/robots/a/memories/absent", params={"as_of": "2026-01-01T00:00:00Z"}), 404),
        (client.get("/v1/robots/a/memories/k/versions", params={"before": 0}), 422),
        (client.get("/v1/robots/a/memories/k/versions", params={"limit": 0}), 422),
        (client.get("/v1/robots/a/memories/absent/versions"), 404),
        (client.post("/v1/robots/a/memories/k/versions/0/restore"), 422),
        (client.post("/v1/robots/a/memories/k/versions/x/restore"), 422),
        (client.post("/v1/robots/a/memories/k/versions/9/restore"), 404),
        (client.post("/v1/robots/a/memories/absent/versions/1/restore"), 404),
    ]
    for request, status in cases:
        r = await request
        assert r.status_code == status, (r.request.url, r.text)
        assert r.headers["content-type"] == PROBLEM
    assert await versions(client, "k") == [(2, "two", 1, "a", True), (1, "one", 1, "a", False)]
    assert (await client.get("/v1/robots/a/memories/absent")).status_code == 404
    assert await version_rows(client, ns) == 1


async def test_patch_sets_or_boosts_importance_as_a_new_version_and_re_places_holders(
    client,
) -> None:
    await client.put("/v1/robots/a/memories/k", json={"content": "alpha note", "importance": 4})
    assert await recalled(client, "b", "alpha") == ["alpha note"]  # b holds it at 4

    async def patch(body: dict) -> tuple:
        r = await client.patch("/v1/robots/a/memories/k", json=body)
        return (r.status_code, r.json().get("importance"), r.json().get("version"))

    assert await patch({"boost": 2}) == (200, 6, 2)
    assert await patch({"boost": 9}) == (200, 10, 3)  # kept within 0-10
    assert await patch({"boost": -2.5}) == (200, 7.5, 4)
    assert await patch({"importance": 0}) == (200, 0, 5)
    assert await patch({"boost": -1}) == (200, 0, 5)  # unchanged: no new version
    items = (await client.get("/v1/robots/a/working-memory")).json()["items"]
    assert [(i["key"], i["importance"]) for i in items] == [("k", 0)]
    assert await working_memory(client, "b") == {}  # withdrawn: it held importance 4
    listed = await versions(client, "k")
    assert [(v[0], v[2]) for v in listed] == [(5, 0), (4, 7.5), (3, 10), (2, 6), (1, 4)]
    got = (await client.get("/v1/robots/a/memories/k")).json()
    assert (got["content"], got["importance"], got["embedding_status"]) == (
        "alpha note",
        0,
        "pending",
    )


async def test_bad_importance_patches_are_4xx_problem_json_and_write_nothing(client) -> None:
    await client.put("/v1/robots/a/memories/k", json={"content": "one", "importance": 3})
    for body, status in (
        ({}, 422),
        ({"importance": 2, "boost": 1}, 422),
        ({"importance": 11}, 422),
        ({"importance": "5"}, 422),
        ({"boost": 10.5}, 422),
        ({"boost": 1, "extra": 1}, 422),
    ):
        r = await client.patch("/v1/robots/a/memories/k", json=body)
        assert r.status_code == status, body
        assert r.headers["content-type"] == PROBLEM
    r = await client.patch("/v1/robots/a/memories/absent", json={"boost": 1})
    assert r.status_code == 404
    await client.delete("/v1/robots/a/memories/k")
    r = await client.patch("/v1/robots/a/memories/k", json={"boost": 1})
    assert r.status_code == 404  # soft-deleted: restore it first
    got = (await client.get("/v1/robots/a/memories/k", params={"include_deleted": "true"})).json()
    assert (got["importance"], got["version"]) == (3, 1)
