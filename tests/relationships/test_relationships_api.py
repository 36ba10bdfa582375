"""Relationships (issue 35, item 5): the edges kept from shared tags (exact Jaccard weights,
the 50-edge bound, recomputed when tags change), supersede and derived-from, explicit links
(and their refusals writing nothing), `related` at depth 1 and 2, namespaces apart, and
recall's `expand: related`."""

from __future__ import annotations

import uuid

from sqlalchemy import text

PROBLEM = "application/problem+json"


async def add(client, key: str, tags: list[str], content: str | None = None, **body) -> dict:
    r = await client.post(
        "/v1/robots/a/memories",
        json={"key": key, "content": content or f"memory {key}", "tags": tags, **body},
    )
    assert r.status_code == 201, r.text
    return r.json()


async def edges(client, ns: str, origin: str | None = None) -> set[tuple[str, str, str, float]]:
    """(source key, target key, type, weight) of the namespace's stored edges."""
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text("""
            SELECT s.key AS source, t.key AS target, l.type, l.weight
            FROM memory_link l
            JOIN memory_key s ON s.memory_id = l.source_id
            JOIN memory_key t ON t.memory_id = l.target_id
            JOIN namespace n ON n.id = l.namespace_id
            WHERE n.name = :ns AND (CAST(:origin AS text) IS NULL OR l.origin = :origin)"""),
            {"ns": ns, "origin": origin},
        )
        return {(r.source, r.target, r.type, r.weight) for r in rows}


async def related(client, key: str, **params) -> list[tuple[str, int, float, str, str, str]]:
    r = await client.get(f"/v1/robots/a/memories/{key}/related", params=params)
    assert r.status_code == 200, r.text
    return [
        (m["key"], m["depth"], m["weight"], m["edge"], m["direction"], m["via"])
        for m in r.json()["memories"]
    ]


async def tagged(client) -> None:
    """a {x,y}, b {x,y,z}, c {x}, d {z,w}, e {q}: added in this order."""
    for key, tags in [
        ("a", ["x", "y"]),
        ("b", ["x", "y", "z"]),
        ("c", ["x"]),
        ("d", ["z", "w"]),
        ("e", ["q"]),
    ]:
        await add(client, key, tags)


async def test_shared_tags_make_edges_weighted_by_exact_jaccard(client, ns) -> None:
    await tagged(client)
    # Each memory's own edges, to the memories before it sharing a tag.
    assert await edges(client, ns, "tags") == {
        ("b", "a", "related_to", 2 / 3),
        ("c", "a", "related_to", 1 / 2),
        ("c", "b", "related_to", 1 / 3),
        ("d", "b", "related_to", 1 / 4),
    }
    # Read either way.
    assert await related(client, "a") == [
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
    ]
    assert await related(client, "b") == [
        ("a", 1, 2 / 3, "related_to", "out", "b"),
        ("c", 1, 1 / 3, "related_to", "in", "b"),
        ("d", 1, 1 / 4, "related_to", "in", "b"),
    ]
    assert await related(client, "e") == []
