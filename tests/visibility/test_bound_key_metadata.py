"""Counts and names are metadata (issue 43): through a key bound to a robot, the namespace's
statistics count only what that robot may read and show only its own working memory, and the
pools are only those it may read; a snapshot leaves out what its robot may no longer read,
and a merged key does not lead to a survivor the robot may not read.

ann and bob are the group `team`; the pool `ops` grants cat write and dan read."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.auth.test_auth import bearer

PROBLEM = "application/problem+json"
MEMORIES: list[tuple[str, str, dict[str, Any]]] = [
    ("ann", "open", {"embedding": [1.0] + [0.0] * 383}),
    ("ann", "ann-own", {"visibility": "private"}),
    ("ann", "for-bob", {"visibility": "private", "readers": ["bob"]}),
    ("ann", "team-note", {"visibility": "group"}),
    ("cat", "cat-own", {"visibility": "private"}),
    ("cat", "cat-gone", {"visibility": "private"}),  # soft-deleted below
    ("cat", "in-ops", {"pool": "ops"}),
]
READS = {
    "ann": {"open", "ann-own", "for-bob", "team-note"},
    "bob": {"open", "for-bob", "team-note"},
    "cat": {"open", "cat-own", "cat-gone", "in-ops"},
    "dan": {"open", "in-ops"},
}


async def bound_key(client: httpx.AsyncClient, ns: str, robot: str | None) -> dict[str, str]:
    """A key of the namespace (admin) or bound to `robot` (writer), as `htm keys` makes one."""
    from app.auth.schemas import ApiKeyCreate
    from app.auth.service import ApiKeyService
    from app.namespaces.repository import NamespaceRepository

    c = client.app.state.components
    ns_id = await NamespaceRepository.resolve(c.sessionmaker, c.namespace_ids, ns)
    role = "admin" if robot is None else "writer"
    async with c.sessionmaker() as session, session.begin():
        created = await ApiKeyService(
            session=session, namespace_id=ns_id, cache=c.key_cache
        ).create(ns, ApiKeyCreate(name=role, role=role, robot=robot))
    return bearer(created.key)


@pytest.fixture
async def world(app_factory) -> Any:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as client:
        admin = await bound_key(client, ns, None)
        keys = {robot: await bound_key(client, ns, robot) for robot in READS}

        async def call(method: str, url: str, body: Any = None) -> Any:
            r = await client.request(method, url, headers=admin, json=body)
            assert r.status_code < 300, r.text
            return r.json()

        await call("PUT", "/v1/groups/team", {"members": ["ann", "bob"]})
        await call("PUT", "/v1/pools/ops", {"type": "team", "writers": ["cat"], "readers": ["dan"]})
        for author, key, extra in MEMORIES:
            body = {"key": key, "content": f"zebra {key} fact " * 3, "tags": [key], **extra}
            await call("POST", f"/v1/robots/{author}/memories", body)
        await call("DELETE", "/v1/robots/cat/memories/cat-gone")
        await call("PUT", "/v1/robots/dan", {})
        yield client, ns, admin, keys, call


async def counted(client: httpx.AsyncClient, ns: str, keys: set[str]) -> dict[str, int]:
    """The namespace's figures, counted over these memories' rows (as the counters count)."""
    size = (
        "coalesce(pg_column_size(content), 0) + coalesce(pg_column_size(metadata), 0)"
        " + coalesce(pg_column_size(tags), 0) + coalesce(pg_column_size(embedding), 0)"
    )
    async with client.app.state.components.sessionmaker() as s:
        row = (
            await s.execute(
                text(f"""
                SELECT count(*) FILTER (WHERE deleted_at IS NULL),
                       count(*) FILTER (WHERE deleted_at IS NOT NULL),
                       count(*) FILTER (WHERE deleted_at IS NULL
                                        AND embedding_status = 'pending'),
                       coalesce(sum({size}), 0)
                FROM memory WHERE namespace_id = (SELECT id FROM namespace WHERE name = :ns)
                  AND key = ANY(:keys)"""),
                {"ns": ns, "keys": sorted(keys)},
            )
        ).one()
    names = ("memories", "deleted_memories", "pending_embeddings", "memory_bytes")
    return dict(zip(names, row, strict=True))


async def test_stats_through_a_bound_key_count_what_its_robot_reads(world) -> None:
    client, ns, admin, keys, _ = world
    for robot, readable in READS.items():
        r = await client.get("/v1/stats", headers=keys[robot])
        assert r.status_code == 200, r.text
        body = r.json()
        expected = await counted(client, ns, readable)
        assert {k: body[k] for k in expected} == expected, robot
        assert expected["memories"] == len(readable - {"cat-gone"})
        assert [(u["robot"], u["working_memory"]["group"]) for u in body["robots"]] == [
            (robot, "team" if robot in ("ann", "bob") else None)
        ]
    body = (await client.get("/v1/stats", headers=admin)).json()
    everything = await counted(client, ns, {k for _, k, _ in MEMORIES})
    assert {k: body[k] for k in everything} == everything
    assert [u["robot"] for u in body["robots"]] == ["ann", "bob", "cat", "dan"]


async def test_pools_show_a_robot_only_those_it_may_read(world) -> None:
    client, _, admin, keys, call = world
    await call("PUT", "/v1/pools/all", {"type": "shared", "public_read": True})
    await call("PUT", "/v1/pools/gone", {"type": "shared", "readers": ["dan"]})
    await call("DELETE", "/v1/pools/gone")  # archived: read by nobody
    names = {"ann": ["all"], "bob": ["all"], "cat": ["all", "ops"], "dan": ["all", "ops"]}
    for robot, shown in names.items():
        r = await client.get("/v1/pools", headers=keys[robot])
        assert [p["name"] for p in r.json()] == shown, robot
        for pool in ("all", "ops", "gone", "nope"):
            r = await client.get(f"/v1/pools/{pool}", headers=keys[robot])
            if pool in shown:
                assert r.status_code == 200, (robot, pool)
                assert r.json()["stats"]["by_author"] == ({"cat": 1} if pool == "ops" else {})
            else:  # as a pool that does not exist
                assert r.status_code == 404, (robot, pool, r.text)
                assert r.headers["content-type"] == PROBLEM
                assert r.json()["detail"] == f"pool {pool!r} does not exist"
    r = await client.get("/v1/pools", headers=admin)
    assert [p["name"] for p in r.json()] == ["all", "gone", "ops"]
    assert (await client.get("/v1/pools/gone", headers=admin)).status_code == 200


async def test_a_snapshot_leaves_out_what_its_robot_may_no_longer_read(world) -> None:
    client, _, _, keys, call = world
    dan = keys["dan"]
    r = await client.post(
        "/v1/robots/dan/recall",
        headers=dan,
        json={"query": "zebra", "strategy": "fulltext", "pools": ["ops"]},
    )
    assert r.status_code == 200, r.text
    taken = (await client.post("/v1/robots/dan/snapshots", headers=dan, json={})).json()
    assert taken["item_count"] == 2
    got = (await client.get(f"/v1/robots/dan/snapshots/{taken['id']}", headers=dan)).json()
    tokens = {i["key"]: i["tokens"] for i in got["items"]}
    assert (sorted(tokens), got["readable"]) == (["in-ops", "open"], 2)
    # dan loses the pool: in-ops is no longer dan's to see, in the snapshot either.
    await call("DELETE", "/v1/pools/ops/grants/dan")
    got = (await client.get(f"/v1/robots/dan/snapshots/{taken['id']}", headers=dan)).json()
    assert [i["key"] for i in got["items"]] == ["open"]
    assert (got["item_count"], got["tokens"], got["readable"]) == (1, tokens["open"], 1)
    listed = (await client.get("/v1/robots/dan/snapshots", headers=dan)).json()
    assert [(s["item_count"], s["tokens"]) for s in listed] == [(1, tokens["open"])]
    r = await client.post(f"/v1/robots/dan/snapshots/{taken['id']}/restore", headers=dan)
    assert r.status_code == 200, r.text
    assert (r.json()["restored"], r.json()["skipped"]) == (["open"], [])
    assert "in-ops" not in r.text
    # What it may still read and was forgotten since is named, as before.
    await call("DELETE", "/v1/robots/ann/memories/open")
    r = await client.post(f"/v1/robots/dan/snapshots/{taken['id']}/restore", headers=dan)
    assert r.json()["skipped"] == [{"key": "open", "reason": "forgotten"}]


async def test_a_merged_key_does_not_lead_to_a_survivor_the_robot_may_not_read(world) -> None:
    client, ns, _, keys, call = world
    await call("POST", "/v1/robots/ann/memories", {"key": "dup", "content": "a fact, again"})
    # `htm dedupe` merged dup into open (both namespace-wide then); open is narrowed since.
    async with client.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(
            text("""
            WITH k AS (SELECT key, memory_id FROM memory_key
                       WHERE namespace_id = (SELECT id FROM namespace WHERE name = :ns))
            INSERT INTO memory_alias (memory_id, survivor_id)
            SELECT (SELECT memory_id FROM k WHERE key = 'dup'),
                   (SELECT memory_id FROM k WHERE key = 'open')"""),
            {"ns": ns},
        )
    await call("DELETE", "/v1/robots/ann/memories/dup")
    r = await client.get("/v1/robots/cat/memories/dup", headers=keys["cat"])
    assert r.json()["key"] == "open"
    await call(
        "PUT", "/v1/robots/ann/memories/open", {"content": "zebra open", "visibility": "private"}
    )
    r = await client.get("/v1/robots/cat/memories/dup", headers=keys["cat"])
    assert r.status_code == 404, r.text
    assert r.json()["detail"] == "memory 'dup' does not exist"
    assert "zebra open" not in r.text
    r = await client.get("/v1/robots/ann/memories/dup", headers=keys["ann"])
    assert (r.status_code, r.json()["key"]) == (200, "open")
