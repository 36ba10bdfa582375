"""Add, retrieve, upsert, list, forget and restore over HTTP, against real Postgres and Redis."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

PROBLEM = "application/problem+json"


def vec(i: int, dim: int = 384) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


async def count_rows(client, ns: str) -> int:
    res = client.app.state.components
    async with res.sessionmaker() as s:
        return (
            await s.execute(
                text(
                    "SELECT count(*) FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                    "WHERE n.name = :ns"
                ),
                {"ns": ns},
            )
        ).scalar_one()


async def test_add_returns_201_with_key_tokens_and_embedding_status(client) -> None:
    r = await client.post(
        "/v1/robots/alice/memories",
        json={
            "content": "PostgreSQL uses MVCC.",
            "key": "pg-mvcc",
            "importance": 4,
            "tags": ["db"],
            "metadata": {"src": "docs"},
        },
    )
    assert r.status_code == 201
    body = r.json()
    assert body["key"] == "pg-mvcc"
    assert body["author"] == "alice"
    assert body["token_count"] == 6  # tiktoken cl100k_base: "PostgreSQL uses MVCC."
    assert body["embedding_status"] == "pending"  # no embedder configured, no vector sent
    assert (body["importance"], body["tags"], body["metadata"]) == (4, ["db"], {"src": "docs"})
    assert body["created"] is True
    assert body["working_memory"] == {"admitted": True, "reason": "admitted", "evicted": []}

    robots = (await client.get("/v1/robots")).json()
    assert [rb["name"] for rb in robots] == ["alice"]
    assert robots[0]["working_memory_budget"] == 128000


async def test_key_is_generated_when_absent_and_client_vector_marks_ready(client) -> None:
    r = await client.post("/v1/robots/bob/memories", json={"content": "x", "embedding": vec(1)})
    assert r.status_code == 201
    body = r.json()
    assert body["key"].startswith("m-") and len(body["key"]) == 34
    assert (body["embedding_status"], body["embedding_model"]) == ("ready", "client")


async def test_duplicate_key_is_409_and_writes_nothing(client, ns) -> None:
    assert (
        await client.post("/v1/robots/a/memories", json={"content": "one", "key": "k"})
    ).status_code == 201
    r = await client.post("/v1/robots/a/memories", json={"content": "two", "key": "k"})
    assert r.status_code == 409
    assert r.headers["content-type"] == PROBLEM
    assert r.json()["keys"] == ["k"]
    assert await count_rows(client, ns) == 1
    assert (await client.get("/v1/robots/a/memories/k")).json()["content"] == "one"


async def test_put_is_an_idempotent_upsert(client) -> None:
    body = {"content": "v1", "importance": 2}
    r1 = await client.put("/v1/robots/a/memories/cfg", json=body)
    r2 = await client.put("/v1/robots/a/memories/cfg", json=body)
    assert (r1.status_code, r2.status_code) == (201, 200)
    assert r1.json()["id"] == r2.json()["id"]
    r3 = await client.put("/v1/robots/a/memories/cfg", json={"content": "v2 is longer"})
    assert r3.status_code == 200
    got = (await client.get("/v1/robots/a/memories/cfg")).json()
    assert (got["content"], got["importance"], got["token_count"]) == ("v2 is longer", 1, 4)


async def test_batch_is_all_or_nothing(client, ns) -> None:
    await client.post("/v1/robots/a/memories", json={"content": "taken", "key": "taken"})
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": "a", "key": "b1"}, {"content": "b", "key": "taken"}]},
    )
    assert r.status_code == 409
    assert r.json()["keys"] == ["taken"]
    assert await count_rows(client, ns) == 1
    assert (await client.get("/v1/robots/a/memories/b1")).status_code == 404

    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": f"m{i}", "key": f"b{i}"} for i in range(5)]},
    )
    assert r.status_code == 201
    assert [m["key"] for m in r.json()["memories"]] == [f"b{i}" for i in range(5)]
    assert await count_rows(client, ns) == 6


async def test_a_store_only_batch_leaves_working_memory_as_it_was(client, ns) -> None:
    """`working_memory: false` (backfills, imports): stored and counted long-term, placed
    nowhere, nothing evicted; the robot's working memory keeps exactly what it held."""
    r = await client.post("/v1/robots/a/memories", json={"content": "focus now", "key": "now"})
    assert r.json()["working_memory"]["admitted"] is True
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={
            "memories": [{"content": f"old {i}", "key": f"old{i}"} for i in range(3)],
            "working_memory": False,
        },
    )
    assert r.status_code == 201
    assert [(m["key"], m["working_memory"]) for m in r.json()["memories"]] == [
        (f"old{i}", {"admitted": False, "reason": "not_placed", "evicted": []}) for i in range(3)
    ]
    wm = (await client.get("/v1/robots/a/working-memory")).json()
    assert [i["key"] for i in wm["items"]] == ["now"]
    listed = (await client.get("/v1/robots/a/memories", params={"limit": 10})).json()["items"]
    assert sorted(m["key"] for m in listed) == ["now", "old0", "old1", "old2"]
    stats = (await client.get("/v1/robots/a/stats")).json()
    assert (stats["long_term"]["memories"], stats["working_memory"]["items"]) == (4, 1)

    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": "x", "key": "x"}], "working_memory": "no"},
    )
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
    assert await count_rows(client, ns) == 4


async def test_batch_with_a_repeated_key_is_409(client, ns) -> None:
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"content": "a", "key": "same"}, {"content": "b", "key": "same"}]},
    )
    assert r.status_code == 409
    assert await count_rows(client, ns) == 0


async def test_batch_over_the_configured_size_is_413(app_factory, ns) -> None:
    async with app_factory(max_batch_size=3) as client:
        client.headers["X-Namespace"] = ns
        r = await client.post(
            "/v1/robots/a/memories/batch", json={"memories": [{"content": "x"}] * 4}
        )
        assert r.status_code == 413
        assert r.headers["content-type"] == PROBLEM
        assert (r.json()["detail"], r.json()["field"]) == (
            "a request holds at most 3 memories; got 4", "memories",
        )  # fmt: skip
        assert await count_rows(client, ns) == 0


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [
        ({"content": ""}, 422, "body.content"),
        ({"content": "x", "importance": 11}, 422, "body.importance"),
        ({"content": "x", "importance": -1}, 422, "body.importance"),
        ({"content": "x", "key": "has space"}, 422, "body.key"),
        ({"content": "x", "key": "k" * 129}, 422, "body.key"),
        ({"content": "x", "tags": ["bad tag"]}, 422, "body.tags"),
        ({"content": "x", "metadata": ["not", "an", "object"]}, 422, "body.metadata"),
        ({"content": "x", "surprise": 1}, 422, "body.surprise"),
        ({"content": "x", "created_at": "2025-01-01T00:00:00"}, 422, "body.created_at"),
        ({"content": "x", "embedding": [1.0, 0.0]}, 422, "body.embedding"),
        (
            {"content": "x", "metadata": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}},
            422,
            "body.metadata",
        ),
        ({"content": "x" * (256 * 1024 + 1)}, 413, "content"),
    ],
)
async def test_bad_input_is_4xx_problem_json_and_writes_nothing(
    client, ns, payload, status, field
) -> None:
    r = await client.post("/v1/robots/a/memories", json=payload)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status
    fields = [e["field"] for e in body.get("errors", [])] + [body.get("field")]
    assert any(f and f.startswith(field) for f in fields), body
    assert await count_rows(client, ns) == 0


async def test_malformed_json_is_400(client) -> None:
    r = await client.post(
        "/v1/robots/a/memories", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.headers["content-type"] == PROBLEM


async def test_bad_robot_name_is_422(client) -> None:
    r = await client.post("/v1/robots/bad%20name/memories", json={"content": "x"})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "path.robot"


SECRET_QUERY = {"query": "secret plan", "strategy": "fulltext"}


async def test_soft_delete_hides_restore_brings_back_hard_needs_confirmation(client) -> None:
    await client.post("/v1/robots/a/memories", json={"content": "secret plan", "key": "plan"})
    await client.post("/v1/robots/a/memories", json={"content": "other", "key": "other"})

    r = await client.delete("/v1/robots/a/memories/plan")
    assert r.status_code == 200 and r.json()["deleted_at"] is not None
    assert (await client.get("/v1/robots/a/memories/plan")).status_code == 404
    listed = (await client.get("/v1/robots/a/memories")).json()["items"]
    assert [m["key"] for m in listed] == ["other"]
    r = await client.post(
        "/v1/robots/a/recall", json={"query": "secret plan", "strategy": "fulltext"}
    )
    assert r.json()["hits"] == []
    assert (await client.get("/v1/robots/a/memories/plan?include_deleted=true")).status_code == 200

    r = await client.post("/v1/robots/a/memories/plan/restore")
    assert r.status_code == 200 and r.json()["deleted_at"] is None
    r = await client.post(
        "/v1/robots/a/recall", json={"query": "secret plan", "strategy": "fulltext"}
    )
    assert [h["key"] for h in r.json()["hits"]] == ["plan"]

    r = await client.delete("/v1/robots/a/memories/plan?hard=true")
    assert r.status_code == 400 and r.json()["field"] == "confirm"
    r = await client.delete("/v1/robots/a/memories/plan?hard=true&confirm=other")
    assert r.status_code == 400
    assert (await client.get("/v1/robots/a/memories/plan")).status_code == 200

    r = await client.delete("/v1/robots/a/memories/plan?hard=true&confirm=plan")
    assert r.status_code == 200
    assert (await client.get("/v1/robots/a/memories/plan?include_deleted=true")).status_code == 404
    # The key is free again after a hard delete.
    r = await client.post("/v1/robots/a/memories", json={"content": "new", "key": "plan"})
    assert r.status_code == 201


LIST = "/v1/robots/a/memories"


async def test_list_filters_and_cursor_pagination(client) -> None:
    for i in range(7):
        await client.post(
            "/v1/robots/a/memories" if i % 2 else "/v1/robots/b/memories",
            json={
                "content": f"m{i}",
                "key": f"k{i}",
                "type": "note" if i < 4 else "fact",
                "importance": i,
                "tags": ["even"] if i % 2 == 0 else ["odd"],
                "created_at": f"2025-01-0{i + 1}T00:00:00Z",
            },
        )
    page1 = (await client.get("/v1/robots/a/memories?limit=3")).json()
    assert [m["key"] for m in page1["items"]] == ["k6", "k5", "k4"]
    page2 = (
        await client.get(f"/v1/robots/a/memories?limit=3&cursor={page1['next_cursor']}")
    ).json()
    assert [m["key"] for m in page2["items"]] == ["k3", "k2", "k1"]
    page3 = (
        await client.get(f"/v1/robots/a/memories?limit=3&cursor={page2['next_cursor']}")
    ).json()
    assert ([m["key"] for m in page3["items"]], page3["next_cursor"]) == (["k0"], None)

    async def keys(q: str) -> list[str]:
        r = await client.get(f"/v1/robots/a/memories?{q}")
        assert r.status_code == 200, r.text
        return [m["key"] for m in r.json()["items"]]

    assert await keys("scope=self") == ["k5", "k3", "k1"]
    assert await keys("type=note") == ["k3", "k2", "k1", "k0"]
    assert await keys("tag=odd") == ["k5", "k3", "k1"]
    assert await keys("min_importance=5") == ["k6", "k5"]
    assert await keys("timeframe=between 2025-01-02 and 2025-01-03") == ["k2", "k1"]
    r = await client.get("/v1/robots/a/memories?timeframe=the day before never")
    assert r.status_code == 422
    assert "today, yesterday" in r.json()["accepted"]
    assert (await client.get("/v1/robots/a/memories?cursor=garbage")).status_code == 400


async def test_concurrent_adds_of_one_key_give_one_201_and_409s(client, ns) -> None:
    rs = await asyncio.gather(
        *(
            client.post("/v1/robots/a/memories", json={"content": f"c{i}", "key": "race"})
            for i in range(8)
        )
    )
    assert sorted(r.status_code for r in rs) == [201] + [409] * 7
    assert await count_rows(client, ns) == 1


async def test_robot_budget_can_be_set_per_robot(client) -> None:
    r = await client.put("/v1/robots/r1", json={"working_memory_budget": 500})
    assert r.status_code == 200
    assert (r.json()["working_memory_budget"], r.json()["working_memory_budget_is_default"]) == (
        500,
        False,
    )
    got = (await client.get("/v1/robots/r1")).json()
    assert got["working_memory_budget"] == 500
    assert (await client.get("/v1/robots/nobody")).status_code == 404
    r = await client.put("/v1/robots/r1", json={"working_memory_budget": 0})
    assert r.status_code == 422


async def test_a_robot_first_seen_in_a_rejected_request_works_afterwards(client) -> None:
    # The 409 rolls back the robot's registration too; nothing may remember its id.
    await client.post("/v1/robots/first/memories", json={"content": "x", "key": "taken"})
    r = await client.post("/v1/robots/newcomer/memories", json={"content": "y", "key": "taken"})
    assert r.status_code == 409
    r = await client.post("/v1/robots/newcomer/memories", json={"content": "z", "key": "free"})
    assert (r.status_code, r.json()["author"]) == (201, "newcomer")
    assert [rb["name"] for rb in (await client.get("/v1/robots")).json()] == ["first", "newcomer"]


# The fields an add answers beyond what a read returns.
ADDED_ONLY = {"created", "working_memory", "duplicate_of", "superseded", "supersede_proposals"}


async def test_the_add_response_is_what_a_read_returns(client) -> None:
    body = {
        "content": "As stored.",
        "key": "same",
        "type": "note",
        "importance": 2.5,
        "tags": ["x"],
        "metadata": {"a": [1, {"b": None}]},
        "embedding": [0.5] * 384,
    }
    added = (await client.post("/v1/robots/a/memories", json=body)).json()
    read = (await client.get("/v1/robots/a/memories/same")).json()
    assert {k: v for k, v in added.items() if k not in ADDED_ONLY} == read
    batch = (
        await client.post(
            "/v1/robots/a/memories/batch", json={"memories": [{"content": "b1"}, {"content": "b2"}]}
        )
    ).json()
    for m in batch["memories"]:
        got = (await client.get(f"/v1/robots/a/memories/{m['key']}")).json()
        assert {k: v for k, v in m.items() if k not in ADDED_ONLY} == got


async def test_a_mixed_batch_stores_every_field_of_every_memory(client, ns) -> None:
    # One statement stores a batch from parallel arrays: ragged tags, nested metadata, some
    # embeddings missing, some created_at given. Each row must get its own values.
    memories = [
        {
            "content": "First, with everything.",
            "key": "f1",
            "type": "note",
            "importance": 7.25,
            "tags": ["a", "b", "c"],
            "metadata": {"n": {"deep": [1, "zwölf", None]}, "ok": True},
            "created_at": "2026-03-01T12:00:00+00:00",
            "embedding": [0.25] * 384,
        },
        {"content": "Second: no tags, no vector.", "key": "f2", "tags": []},
        {"content": "Third has one tag.", "key": "f3", "tags": ["solo"], "embedding": vec(3)},
    ]
    r = await client.post("/v1/robots/a/memories/batch", json={"memories": memories})
    assert r.status_code == 201
    got = {m["key"]: m for m in r.json()["memories"]}
    assert [m["key"] for m in r.json()["memories"]] == ["f1", "f2", "f3"]
    ids = [got[k]["id"] for k in ("f1", "f2", "f3")]
    assert ids == sorted(ids) and len(set(ids)) == 3  # numbered in the batch's order
    for m in memories:
        read = (await client.get(f"/v1/robots/a/memories/{m['key']}")).json()
        assert read["content"] == m["content"]
        assert read["tags"] == m.get("tags", [])
        assert read["metadata"] == m.get("metadata", {})
        assert read["importance"] == m.get("importance", 1.0)
        assert read["type"] == m.get("type", "fact")
        assert read["embedding_status"] == ("ready" if "embedding" in m else "pending")
        assert read["embedding_model"] == ("client" if "embedding" in m else None)
        assert {k: v for k, v in got[m["key"]].items() if k not in ADDED_ONLY} == read
    assert got["f1"]["created_at"] == "2026-03-01T12:00:00Z"
    res = client.app.state.components
    async with res.sessionmaker() as s:
        rows = (
            await s.execute(
                text(
                    "SELECT m.key, m.embedding::text AS e, m.token_count, e.kind, e.memory_id"
                    " FROM memory m JOIN namespace n ON n.id = m.namespace_id"
                    " JOIN memory_event e ON e.memory_id = m.id"
                    " WHERE n.name = :ns AND e.kind = 'add' ORDER BY m.key"
                ),
                {"ns": ns},
            )
        ).all()
    assert [(r.key, r.kind, r.memory_id) for r in rows] == [
        ("f1", "add", ids[0]),
        ("f2", "add", ids[1]),
        ("f3", "add", ids[2]),
    ]
    assert rows[0].e == "[" + ",".join(["0.25"] * 384) + "]"
    assert rows[1].e is None
    assert rows[2].e == "[" + ",".join("1" if i == 3 else "0" for i in range(384)) + "]"
    assert [r.token_count for r in rows] == [got[k]["token_count"] for k in ("f1", "f2", "f3")]
