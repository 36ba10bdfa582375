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


async def test_related_at_depth_two_takes_each_memory_by_its_best_path(client, ns) -> None:
    await tagged(client)
    # d is two edges from a (through b: 2/3 × 1/4); c is reached directly (1/2) rather than
    # through b (2/3 × 1/3).
    assert await related(client, "a", depth=2) == [
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
        ("d", 2, 2 / 3 * 1 / 4, "related_to", "in", "b"),
    ]
    assert await related(client, "a", depth=2, limit=2) == [
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
    ]
    assert await related(client, "a", depth=2, type="supports") == []
    r = await client.get("/v1/robots/a/memories/a/related", params={"depth": 4})
    assert r.status_code == 422
    r = await client.get("/v1/robots/a/memories/nope/related")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM


async def test_a_change_of_tags_drops_and_adds_exactly_its_edges(client, ns) -> None:
    await tagged(client)
    # c: {x} → {z}: it leaves a and b's x, joins b and d's z.
    r = await client.put("/v1/robots/a/memories/c", json={"content": "memory c", "tags": ["z"]})
    assert r.status_code == 200, r.text
    assert await edges(client, ns, "tags") == {
        ("b", "a", "related_to", 2 / 3),
        ("c", "b", "related_to", 1 / 3),
        ("c", "d", "related_to", 1 / 2),
        ("d", "b", "related_to", 1 / 4),
    }
    assert await related(client, "a") == [("b", 1, 2 / 3, "related_to", "in", "a")]
    assert await related(client, "c") == [
        ("d", 1, 1 / 2, "related_to", "out", "c"),
        ("b", 1, 1 / 3, "related_to", "out", "c"),
    ]
    # b: {x,y,z} → {x,y}: d's edge to b stays stored (d was not written) but no longer
    # holds; c's edge to b now weighs 0 and holds neither.
    r = await client.put(
        "/v1/robots/a/memories/b", json={"content": "memory b", "tags": ["x", "y"]}
    )
    assert r.status_code == 200, r.text
    assert ("b", "a", "related_to", 1.0) in await edges(client, ns, "tags")
    assert await related(client, "b") == [("a", 1, 1.0, "related_to", "out", "b")]
    assert await related(client, "d") == [("c", 1, 1 / 2, "related_to", "in", "d")]
    # A soft delete takes a memory out of every walk; a restore brings it back.
    assert (await client.delete("/v1/robots/a/memories/a")).status_code == 200
    assert await related(client, "b") == []
    assert ("b", "a", "related_to", 1.0) in await edges(client, ns, "tags")
    # Restored, a is written again: its own edges are made (to b, which has one to it).
    assert (await client.post("/v1/robots/a/memories/a/restore")).status_code == 200
    assert await edges(client, ns, "tags") == {
        ("a", "b", "related_to", 1.0),
        ("b", "a", "related_to", 1.0),
        ("c", "b", "related_to", 1 / 3),
        ("c", "d", "related_to", 1 / 2),
        ("d", "b", "related_to", 1 / 4),
    }
    assert await related(client, "b") == [("a", 1, 1.0, "related_to", "out", "b")]
    # A move (a new created_at: the row inserted again, same id) recomputes its edges: d's
    # stale one to b goes, one to c comes.
    body = {"content": "memory d", "tags": ["z", "w"], "created_at": "2025-01-01T00:00:00Z"}
    assert (await client.put("/v1/robots/a/memories/d", json=body)).status_code == 200
    assert await edges(client, ns, "tags") == {
        ("a", "b", "related_to", 1.0),
        ("b", "a", "related_to", 1.0),
        ("c", "b", "related_to", 1 / 3),
        ("c", "d", "related_to", 1 / 2),
        ("d", "c", "related_to", 1 / 2),
    }


async def test_a_memory_keeps_its_fifty_strongest_tag_edges_ties_to_the_newer(client, ns) -> None:
    # 55 memories tagged t, added in one batch: each sees those before it, all weighing 1.
    batch = [{"key": f"k{i:02d}", "content": f"memory {i}", "tags": ["t"]} for i in range(55)]
    r = await client.post("/v1/robots/a/memories/batch", json={"memories": batch})
    assert r.status_code == 201, r.text
    # k00 rewritten with t and u: 1/2 to every other one.
    r = await client.put("/v1/robots/a/memories/k00", json={"content": "m", "tags": ["t", "u"]})
    assert r.status_code == 200, r.text
    # last shares t and u with k00 (1), t alone with the others (1/2).
    await add(client, "last", ["t", "u"])
    async with client.app.state.components.sessionmaker() as s:
        ids = dict(
            (
                await s.execute(
                    text("""
                    SELECT k.key, k.memory_id FROM memory_key k
                    JOIN namespace n ON n.id = k.namespace_id WHERE n.name = :ns"""),
                    {"ns": ns},
                )
            ).all()
        )
    stored = await edges(client, ns, "tags")
    out: dict[str, dict[str, float]] = {}
    for source, target, _, weight in stored:
        out.setdefault(source, {})[target] = weight
    batch_keys = [f"k{i:02d}" for i in range(55)]

    def newest(keys: list[str], n: int) -> set[str]:
        return set(sorted(keys, key=lambda k: -ids[k])[:n])

    assert set(out) == {*batch_keys, "last"}
    for i, key in enumerate(batch_keys[1:], 1):  # each: the 50 newest before it, weight 1
        assert out[key] == dict.fromkeys(newest(batch_keys[:i], 50), 1.0), key
    assert [len(out[k]) for k in batch_keys[49:52]] == [49, 50, 50]
    others = batch_keys[1:]
    assert out["k00"] == dict.fromkeys(newest(others, 50), 1 / 2)
    assert out["last"] == {"k00": 1.0, **dict.fromkeys(newest(others, 49), 1 / 2)}


async def test_explicit_links_are_201_then_200_and_refusals_write_nothing(client, ns) -> None:
    await tagged(client)
    url = "/v1/robots/a/memories/a/links"
    r = await client.post(url, json={"target": "e", "type": "supports", "weight": 0.5})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["source"], body["target"], body["type"], body["weight"], body["origin"]) == (
        "a", "e", "supports", 0.5, "explicit",
    )  # fmt: skip
    assert body["created"] is True
    r = await client.post(url, json={"target": "e", "type": "supports", "weight": 0.8})
    assert (r.status_code, r.json()["weight"], r.json()["created"]) == (200, 0.8, False)
    before = await edges(client, ns)
    refused = [
        (url, {"target": "nope"}, 404),
        ("/v1/robots/a/memories/nope/links", {"target": "e"}, 404),
        (url, {"target": "a"}, 422),
        (url, {"target": "e", "type": "likes"}, 422),
        (url, {"target": "e", "weight": 0}, 422),
        (url, {"target": "e", "weight": 1.5}, 422),
    ]
    for path, payload, status in refused:
        r = await client.post(path, json=payload)
        assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), (payload, r.text)
    assert await edges(client, ns) == before
    assert ("a", "e", "supports", 0.8) in before
    assert await related(client, "e") == [("a", 1, 0.8, "supports", "in", "e")]
    assert await related(client, "a") == [
        ("e", 1, 0.8, "supports", "out", "a"),
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
    ]
    # Removing: only explicit links, of the type asked.
    r = await client.delete("/v1/robots/a/memories/a/links/e", params={"type": "contradicts"})
    assert r.status_code == 404
    r = await client.delete("/v1/robots/a/memories/b/links/a")  # a tag edge: not removable
    assert r.status_code == 404
    r = await client.delete("/v1/robots/a/memories/a/links/e", params={"type": "supports"})
    assert (r.status_code, r.json()) == (
        200, {"source": "a", "target": "e", "types": ["supports"]},
    )  # fmt: skip
    assert await edges(client, ns) == before - {("a", "e", "supports", 0.8)}


async def supersede(client, source: str, target: str, robot: str = "a"):
    return await client.post(
        f"/v1/robots/{robot}/memories/{source}/links",
        json={"target": target, "type": "supersedes"},
    )


async def test_a_supersede_link_closing_a_cycle_is_409_naming_it(client, ns) -> None:
    for key in ("a", "b", "c"):
        await add(client, key, [])
    assert (await supersede(client, "a", "b")).status_code == 201
    before = await edges(client, ns)
    r = await supersede(client, "b", "a")  # both ways: a cycle of two
    assert (r.status_code, r.headers["content-type"]) == (409, PROBLEM), r.text
    assert (r.json()["detail"], r.json()["keys"]) == (
        "a supersede cycle: b supersedes a supersedes b; the link would make a memory "
        "supersede itself",
        ["b", "a"],
    )
    assert await edges(client, ns) == before
    assert (await supersede(client, "b", "c")).status_code == 201
    r = await supersede(client, "c", "a")  # a supersedes b supersedes c: c -> a is a cycle
    assert (r.status_code, r.json()["keys"]) == (409, ["c", "a", "b"])
    assert r.json()["detail"].startswith(
        "a supersede cycle: c supersedes a supersedes b supersedes c;"
    )
    # The same edge again is no cycle, and other types may point back.
    assert (await supersede(client, "a", "b")).status_code == 200
    r = await client.post("/v1/robots/a/memories/c/links", json={"target": "a"})
    assert r.status_code == 201
    assert ("c", "a", "supersedes", 1.0) not in await edges(client, ns)


async def test_a_cycle_through_an_add_supersede_or_an_unreadable_memory_is_409(client, ns) -> None:
    await add(client, "old", [], content="Ana lives in Lisbon")
    await add(client, "new", [], content="Ana lives in Berlin", supersedes=["old"])
    r = await supersede(client, "old", "new")  # the add's own edge: new supersedes old
    assert (r.status_code, r.json()["keys"]) == (409, ["old", "new"])
    # b's private memory sits in the middle of the chain: a sees the cycle, not its key.
    await add(client, "x", [])
    r = await client.post(
        "/v1/robots/b/memories", json={"key": "p", "content": "b's", "visibility": "private"}
    )
    assert r.status_code == 201, r.text
    await add(client, "y", [])
    assert (await supersede(client, "p", "x", robot="b")).status_code == 201
    assert (await supersede(client, "y", "p", robot="b")).status_code == 201
    r = await supersede(client, "x", "y")
    assert (r.status_code, r.json()["keys"]) == (409, ["x", "y"])
    assert r.json()["detail"].startswith(
        "a supersede cycle: x supersedes y supersedes (a memory you cannot read) supersedes x;"
    )


async def test_supersede_and_derived_from_are_edges(client, ns) -> None:
    await add(client, "home", [], content="Ana lives in Lisbon")
    new = await add(client, "home@2", [], content="Ana lives in Berlin", supersedes=["home"])
    await add(client, "digest", [], content="a summary", metadata={"summary_of": ["home@2", "x"]})
    source = {"source_key": "home@2", "source_id": new["id"]}
    await add(client, "prop", [], content="Berlin", metadata=source)
    await add(client, "odd", [], content="Berlin?", metadata={"source_id": f"{new['id']}x"})
    assert await edges(client, ns) == {
        ("home@2", "home", "supersedes", 1.0),
        ("digest", "home@2", "derived_from", 1.0),
        ("prop", "home@2", "derived_from", 1.0),
    }
    assert await related(client, "home@2") == [
        ("digest", 1, 1.0, "derived_from", "in", "home@2"),
        ("home", 1, 1.0, "supersedes", "out", "home@2"),
        ("prop", 1, 1.0, "derived_from", "in", "home@2"),
    ]
    # The superseded memory is still reached (not deleted), and reaches on.
    assert await related(client, "home", depth=2) == [
        ("home@2", 1, 1.0, "supersedes", "in", "home"),
        ("digest", 2, 1.0, "derived_from", "in", "home@2"),
        ("prop", 2, 1.0, "derived_from", "in", "home@2"),
    ]
    assert await related(client, "home", depth=2, type="supersedes") == [
        ("home@2", 1, 1.0, "supersedes", "in", "home"),
    ]
    # A PUT that makes the old one current again drops the supersede edge.
    r = await client.put("/v1/robots/a/memories/home", json={"content": "Ana lives in Lisbon"})
    assert r.status_code == 200, r.text
    assert await edges(client, ns) == {
        ("digest", "home@2", "derived_from", 1.0),
        ("prop", "home@2", "derived_from", 1.0),
    }
    # A hard delete takes its edges with it.
    params = {"hard": True, "confirm": "home@2"}
    assert (await client.delete("/v1/robots/a/memories/home@2", params=params)).status_code == 200
    assert await edges(client, ns) == set()


async def test_another_namespace_is_never_reached_or_linked(client, ns, app_factory) -> None:
    await tagged(client)
    other = f"t-{uuid.uuid4().hex[:12]}"
    async with app_factory() as c2:
        c2.headers["X-Namespace"] = other
        for key, tags in [("a", ["x", "y"]), ("z", ["x", "y"]), ("w", ["x"])]:
            await add(c2, key, tags)
        assert await related(c2, "a") == [
            ("z", 1, 1.0, "related_to", "in", "a"),
            ("w", 1, 1 / 2, "related_to", "in", "a"),
        ]
        r = await c2.post("/v1/robots/a/memories/a/links", json={"target": "e"})
        assert r.status_code == 404
        assert await edges(c2, other) == {
            ("z", "a", "related_to", 1.0),
            ("w", "a", "related_to", 1 / 2),
            ("w", "z", "related_to", 1 / 2),
        }
    assert await related(client, "a", depth=3) == [
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
        ("d", 2, 2 / 3 * 1 / 4, "related_to", "in", "b"),
    ]


async def test_recall_expand_related_places_the_related_after_the_hits(client, ns) -> None:
    await add(client, "zebra", ["stripes"], content="the zebra crossed the river")
    await add(client, "horse", ["stripes", "hooves"], content="a horse runs in the field")
    await add(client, "okapi", ["stripes"], content="an okapi hides in the forest")
    await add(client, "fish", ["fins"], content="a zebra fish swims in the tank")
    await add(client, "tank", [], content="glass walls hold water")
    r = await client.post(
        "/v1/robots/a/memories/tank/links", json={"target": "fish", "type": "supports"}
    )
    assert r.status_code == 201
    body = {"query": "zebra", "strategy": "fulltext", "load_into_working_memory": False}
    r = await client.post("/v1/robots/a/recall", json={**body, "limit": 10})
    assert [h["key"] for h in r.json()["hits"]] == ["fish", "zebra"]
    r = await client.post("/v1/robots/a/recall", json={**body, "limit": 10, "expand": "related"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    fish, zebra = hits[0]["score"], hits[1]["score"]
    # By the edge's weight, then the hit it comes from, then key; scored weight × hit's score.
    assert [(h["key"], h["via"], h["score"]) for h in hits] == [
        ("fish", None, fish),
        ("zebra", None, zebra),
        ("tank", {"key": "fish", "type": "supports", "entity": None}, fish),
        ("okapi", {"key": "zebra", "type": "related_to", "entity": None}, zebra),
        ("horse", {"key": "zebra", "type": "related_to", "entity": None}, zebra / 2),
    ]
    # Half the page at most, from the hits that stay: with limit 2, the second hit gives way
    # to the first one's related memory.
    r = await client.post("/v1/robots/a/recall", json={**body, "limit": 2, "expand": "related"})
    assert [(h["key"], h["via"]) for h in r.json()["hits"]] == [
        ("fish", None),
        ("tank", {"key": "fish", "type": "supports", "entity": None}),
    ]
    r = await client.post("/v1/robots/a/recall", json={**body, "limit": 1, "expand": "related"})
    assert [(h["key"], h["via"]) for h in r.json()["hits"]] == [("fish", None)]


async def test_a_walk_follows_each_memorys_fifty_strongest_edges(client, ns) -> None:
    # k25 has its own edges to the 25 before it and edges from the 30 after it (each of
    # them links to the 50 newest before it): 55, all weighing 1. The walk follows the 50
    # strongest, ties to the newer: k00-k04 are left out.
    batch = [{"key": f"k{i:02d}", "content": f"memory {i}", "tags": ["t"]} for i in range(56)]
    r = await client.post("/v1/robots/a/memories/batch", json={"memories": batch})
    assert r.status_code == 201, r.text
    expected = [f"k{i:02d}" for i in range(5, 56) if i != 25]
    assert await related(client, "k25", limit=200) == [
        (k, 1, 1.0, "related_to", "in" if k > "k25" else "out", "k25") for k in expected
    ]


async def test_a_tag_rename_keeps_the_edges_and_new_memories_find_the_new_name(client, ns) -> None:
    await tagged(client)
    before = await edges(client, ns)
    r = await client.post("/v1/tags/rename", json={"from": "x", "to": "xx"})
    assert (r.status_code, r.json()["memories"]) == (200, 3)
    assert await edges(client, ns) == before
    assert await related(client, "a") == [
        ("b", 1, 2 / 3, "related_to", "in", "a"),
        ("c", 1, 1 / 2, "related_to", "in", "a"),
    ]
    await add(client, "f", ["xx"])
    assert await edges(client, ns) - before == {
        ("f", "c", "related_to", 1.0),
        ("f", "a", "related_to", 1 / 2),
        ("f", "b", "related_to", 1 / 3),
    }
