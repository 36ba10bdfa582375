"""Hierarchical tags over HTTP: validation, filters at segment boundaries (and their index),
the tree with counts, renaming and merging a subtree."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import text

from tests.auth.test_auth import bearer, make_key

PROBLEM = "application/problem+json"

TAGGED = {
    "db": ["database"],
    "pg": ["database:postgresql"],
    "tuning": ["database:postgresql:tuning", "ops"],
    "mysql": ["database:mysql"],
    "plural": ["databases"],
    "other": ["ops:oncall"],
}


async def add_tagged(client, robot: str = "a") -> None:
    for key, tags in TAGGED.items():
        r = await client.post(
            f"/v1/robots/{robot}/memories", json={"content": key, "key": key, "tags": tags}
        )
        assert r.status_code == 201, r.text


async def listed(client, *tags: str) -> set[str]:
    r = await client.get("/v1/robots/a/memories", params=[("tag", t) for t in tags])
    assert r.status_code == 200, r.text
    return {m["key"] for m in r.json()["items"]}


async def recalled(client, **filters: list[str]) -> set[str]:
    r = await client.post(
        "/v1/robots/a/recall",
        json={"query": "database", "strategy": "fulltext", "limit": 50, "filters": filters},
    )
    assert r.status_code == 200, r.text
    return {h["key"] for h in r.json()["hits"]}


async def test_a_tag_filter_matches_the_tag_and_its_descendants_at_segment_boundaries(
    client,
) -> None:
    await add_tagged(client)
    assert await listed(client, "database") == {"db", "pg", "tuning", "mysql"}
    assert await listed(client, "database:postgresql") == {"pg", "tuning"}
    assert await listed(client, "database:postgresql:tuning") == {"tuning"}
    assert await listed(client, "databases") == {"plural"}
    assert await listed(client, "data") == set()
    assert await listed(client, "database:mysql", "ops") == {"mysql", "tuning", "other"}


async def test_recall_tag_filters_match_descendants(client) -> None:
    await add_tagged(client)
    for key in TAGGED:  # every memory's content is found by the full-text query
        await client.put(
            f"/v1/robots/a/memories/{key}",
            json={"content": f"database {key}", "tags": TAGGED[key]},
        )
    assert await recalled(client, tags_any=["database"]) == {"db", "pg", "tuning", "mysql"}
    assert await recalled(client, tags_any=["database:postgresql", "databases"]) == {
        "pg",
        "tuning",
        "plural",
    }
    assert await recalled(client, tags_all=["database", "ops"]) == {"tuning"}
    assert await recalled(client, tags_all=["database:mysql", "ops"]) == set()


async def test_bad_tags_are_422_problem_json_and_write_nothing(client, ns) -> None:
    bad = ["a::b", ":a", "a:", "a:b:c:d:e:f:g:h:i", "x" * 65, "with space", ""]
    for tag in bad:
        r = await client.post("/v1/robots/a/memories", json={"content": "x", "tags": [tag]})
        assert r.status_code == 422, tag
        assert r.headers["content-type"] == PROBLEM
        assert r.json()["errors"][0]["field"] == "body.tags.0"
        r = await client.get("/v1/robots/a/memories", params={"tag": tag})
        assert r.status_code == 422, tag
    ok = await client.post(
        "/v1/robots/a/memories", json={"content": "x", "tags": ["a:b:c:d:e:f:g:h", "y" * 64]}
    )
    assert ok.status_code == 201
    async with client.app.state.components.sessionmaker() as s:
        count = (
            await s.execute(
                text(
                    "SELECT count(*) FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                    "WHERE n.name = :ns"
                ),
                {"ns": ns},
            )
        ).scalar_one()
    assert count == 1


def node(name: str, path: str, count: int, total: int, *children: dict) -> dict:
    return {"name": name, "path": path, "count": count, "total": total, "children": list(children)}


async def test_the_tree_counts_exact_tags_and_whole_subtrees(client) -> None:
    await add_tagged(client)
    await client.post(
        "/v1/robots/b/memories",
        json={"content": "b", "key": "b-pg", "tags": ["database:postgresql"]},
    )
    await client.post(
        "/v1/robots/a/memories", json={"content": "gone", "key": "gone", "tags": ["ops"]}
    )
    await client.delete("/v1/robots/a/memories/gone")  # soft-deleted: not counted

    r = await client.get("/v1/tags")
    assert r.status_code == 200
    assert r.json()["tags"] == [
        node(
            "database",
            "database",
            1,
            5,
            node("mysql", "database:mysql", 1, 1),
            node(
                "postgresql",
                "database:postgresql",
                2,
                3,
                node("tuning", "database:postgresql:tuning", 1, 1),
            ),
        ),
        node("databases", "databases", 1, 1),
        node("ops", "ops", 1, 2, node("oncall", "ops:oncall", 1, 1)),
    ]
    only_b = (await client.get("/v1/tags", params={"robot": "b"})).json()["tags"]
    assert only_b == [
        node("database", "database", 0, 1, node("postgresql", "database:postgresql", 1, 1))
    ]
    assert (await client.get("/v1/tags", params={"robot": "nobody"})).status_code == 404
    assert (await client.get("/v1/tags", params={"timeframe": "nonsense"})).status_code == 422


async def test_the_tree_for_a_timeframe_counts_only_memories_created_in_it(client) -> None:
    client.app.state.components.clock.set(lambda: datetime(2026, 3, 10, 12, tzinfo=UTC))
    for key, day in (("old", 1), ("new", 9)):
        await client.post(
            "/v1/robots/a/memories",
            json={
                "content": key,
                "key": key,
                "tags": [f"t:{key}"],
                "created_at": f"2026-03-{day:02d}T10:00:00Z",
            },
        )
    r = await client.get("/v1/tags", params={"timeframe": "last 3 days"})
    assert r.json()["tags"] == [node("t", "t", 0, 1, node("new", "t:new", 1, 1))]


async def test_rename_moves_a_subtree_and_merges_into_an_existing_one(client) -> None:
    await add_tagged(client)
    await client.put(
        "/v1/robots/a/memories/both",
        json={
            "content": "both",
            "tags": ["db:postgresql:tuning", "x", "database:postgresql:tuning"],
        },
    )
    r = await client.post("/v1/tags/rename", json={"from": "db", "to": "database"})
    assert r.status_code == 200, r.text
    assert r.json() == {"from": "db", "to": "database", "memories": 1, "merged": True}
    both = (await client.get("/v1/robots/a/memories/both")).json()
    assert both["tags"] == ["database:postgresql:tuning", "x"]  # merged, first place kept

    r = await client.post(
        "/v1/tags/rename", json={"from": "database:postgresql", "to": "sql:postgres"}
    )
    assert r.json() == {
        "from": "database:postgresql",
        "to": "sql:postgres",
        "memories": 3,
        "merged": False,
    }
    assert await listed(client, "sql:postgres") == {"pg", "tuning", "both"}
    assert await listed(client, "database") == {"db", "mysql"}
    tuning = (await client.get("/v1/robots/a/memories/tuning")).json()
    assert tuning["tags"] == ["sql:postgres:tuning", "ops"]
    # `databases` shares a prefix with `database`, not a segment: untouched.
    assert (await client.get("/v1/robots/a/memories/plural")).json()["tags"] == ["databases"]

    r = await client.post("/v1/tags/rename", json={"from": "nothing", "to": "else"})
    assert r.json() == {"from": "nothing", "to": "else", "memories": 0, "merged": False}


async def test_a_rename_that_would_break_the_tag_limits_is_422_and_writes_nothing(
    client,
) -> None:
    await client.post("/v1/robots/a/memories", json={"content": "x", "key": "k", "tags": ["a:b:c"]})
    cases = [
        {"from": "a", "to": "p:q:r:s:t:u:v"},  # 7 + the 2 segments under a: 9 > 8
        {"from": "a", "to": "z" * 61},  # 61 + len(":b:c") = 65 characters
        {"from": "a", "to": "a"},
        {"from": "a::", "to": "b"},
        {"from": "a"},
        {"from": "a", "to": "b", "extra": 1},
    ]
    for case in cases:
        r = await client.post("/v1/tags/rename", json=case)
        assert r.status_code == 422, case
        assert r.headers["content-type"] == PROBLEM
    assert r.json()["errors"][0]["field"] == "body.extra"
    assert (await client.post("/v1/tags/rename", json=cases[0])).json()["errors"] == [
        {
            "field": "body.to",
            "message": "renaming would make tags longer than 64 characters "
            "or deeper than 8 segments",
            "type": "value_error",
        }
    ]
    assert (await client.get("/v1/robots/a/memories/k")).json()["tags"] == ["a:b:c"]
    r = await client.post("/v1/tags/rename", json={"from": "a", "to": "p:q:r:s:t:u"})
    assert r.status_code == 200  # 8 segments: the limit itself
    got = (await client.get("/v1/robots/a/memories/k")).json()["tags"]
    assert got == ["p:q:r:s:t:u:b:c"]


async def test_rename_is_for_admins_only(app_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as client:
        writer = await make_key(client, ns, "writer")
        admin = await make_key(client, ns, "admin", "adm")
        await client.post(
            "/v1/robots/a/memories",
            json={"content": "x", "key": "k", "tags": ["a"]},
            headers=bearer(writer),
        )
        body = {"from": "a", "to": "b"}
        r = await client.post("/v1/tags/rename", json=body, headers=bearer(writer))
        assert r.status_code == 403
        assert r.headers["content-type"] == PROBLEM
        tags = (await client.get("/v1/tags", headers=bearer(writer))).json()["tags"]
        assert [t["path"] for t in tags] == ["a"]
        r = await client.post("/v1/tags/rename", json=body, headers=bearer(admin))
        assert r.status_code == 200
        tags = (await client.get("/v1/tags", headers=bearer(writer))).json()["tags"]
        assert [t["path"] for t in tags] == ["b"]


async def test_tag_filters_can_use_the_tag_paths_index(client) -> None:
    """With sequential scans off, the planner must still find a plan: the filter's
    expression matches the GIN index memory_tag_paths."""
    await add_tagged(client)
    async with client.app.state.components.sessionmaker() as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        plans = {}
        for op in ("&&", "@>"):
            rows = await s.execute(
                text(
                    "EXPLAIN SELECT id FROM memory m "
                    f"WHERE tag_paths(m.tags) {op} CAST(:t AS text[])"
                ),
                {"t": ["database"]},
            )
            plans[op] = "\n".join(r[0] for r in rows)
    for plan in plans.values():
        assert "memory_tag_paths" in plan, plan
