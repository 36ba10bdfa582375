"""Entities over HTTP: every way a memory is written stores its entities, "everything about
Carla" lists her memories newest first as the memory listing would (visibility, forget,
supersede, paging), the entity list with counts, aliases, and bad input."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

PROBLEM = "application/problem+json"


def at(day: int) -> str:
    return f"2026-11-{day:02d}T10:00:00Z"


async def add(client: Any, robot: str, key: str, content: str, day: int, **extra: Any) -> None:
    r = await client.post(
        f"/v1/robots/{robot}/memories",
        json={"key": key, "content": content, "created_at": at(day), **extra},
    )
    assert r.status_code == 201, r.text


async def about(client: Any, entity: str, robot: str = "ann", **params: Any) -> list[str]:
    r = await client.get(f"/v1/robots/{robot}/entities/{entity}", params=params)
    assert r.status_code == 200, r.text
    return [m["key"] for m in r.json()["items"]]


async def entities(client: Any, robot: str = "ann", **params: Any) -> list[tuple[Any, ...]]:
    r = await client.get(f"/v1/robots/{robot}/entities", params=params)
    assert r.status_code == 200, r.text
    return [(e["entity"], e["kinds"], e["memories"]) for e in r.json()["items"]]


async def stored(client: Any, ns: str, key: str) -> tuple[list[str], list[str]]:
    async with client.app.state.components.sessionmaker() as s:
        row = (
            await s.execute(
                text("""
                SELECT m.entities, m.entity_kinds FROM memory m
                JOIN namespace n ON n.id = m.namespace_id
                WHERE n.name = :ns AND m.key = :key"""),
                {"ns": ns, "key": key},
            )
        ).one()
    return list(row.entities), list(row.entity_kinds)


async def seed(client: Any) -> None:
    await add(client, "ann", "c1", "Carla moved to Lisbon.", 1)
    await add(client, "bob", "c2", "I love pottery", 2, metadata={"speaker": "Carla"})
    r = await client.post(
        "/v1/robots/ann/memories/batch",
        json={
            "memories": [
                {"key": "c3", "content": "Carla's sister Ana called about INC-48213.",
                 "created_at": at(3)},
                {"key": "a1", "content": "Ana likes Lisbon.", "created_at": at(4)},
            ]
        },
    )  # fmt: skip
    assert r.status_code == 201, r.text
    r = await client.put(
        "/v1/robots/ann/memories/c4",
        json={"content": "we had dinner with Carla", "created_at": at(5)},
    )
    assert r.status_code == 201, r.text
    await add(client, "bob", "secret", "Carla is planning a surprise.", 6, visibility="private")


async def test_every_way_in_stores_the_extracted_entities(client, ns) -> None:
    await seed(client)
    assert await stored(client, ns, "c1") == (["carla", "lisbon"], ["name", "name"])
    assert await stored(client, ns, "c2") == (["carla"], ["person"])
    assert await stored(client, ns, "c3") == (
        ["carla", "ana", "inc-48213"],
        ["name", "name", "code"],
    )
    assert await stored(client, ns, "c4") == (["carla"], ["name"])
    # A PUT's new content replaces them, also when it moves the row (another created_at).
    r = await client.put("/v1/robots/ann/memories/c4", json={"content": "we had dinner with Bob"})
    assert r.status_code == 200, r.text
    assert await stored(client, ns, "c4") == (["bob"], ["name"])
    r = await client.put(
        "/v1/robots/ann/memories/c4",
        json={"content": "we had dinner with Carla", "created_at": at(7)},
    )
    assert r.status_code == 200, r.text
    assert await stored(client, ns, "c4") == (["carla"], ["name"])


async def test_everything_about_carla_is_her_memories_newest_first_that_the_robot_reads(
    client,
) -> None:
    await seed(client)
    # "Carla", "carla", "Carla's" are one entity; bob's private memory only bob reads.
    for name in ("Carla", "carla", "Carla's", "CARLA"):
        assert await about(client, name) == ["c4", "c3", "c2", "c1"]
    assert await about(client, "Carla", robot="bob") == ["secret", "c4", "c3", "c2", "c1"]
    assert await about(client, "inc-48213") == ["c3"]
    assert await about(client, "Nobody") == []
    # Paging: the listing's cursor.
    r = await client.get("/v1/robots/ann/entities/Carla", params={"limit": 3})
    page = r.json()
    assert [m["key"] for m in page["items"]] == ["c4", "c3", "c2"]
    assert await about(client, "Carla", cursor=page["next_cursor"], limit=3) == ["c1"]
    # The memory listing's `entity` filter is the same read.
    r = await client.get("/v1/robots/ann/memories", params={"entity": "carla"})
    assert [m["key"] for m in r.json()["items"]] == ["c4", "c3", "c2", "c1"]


async def test_forgotten_and_superseded_memories_leave_until_restored(client) -> None:
    await seed(client)
    assert (await client.delete("/v1/robots/ann/memories/c3")).status_code == 200
    assert await about(client, "Carla") == ["c4", "c2", "c1"]
    assert await about(client, "INC-48213") == []
    assert (await client.post("/v1/robots/ann/memories/c3/restore")).status_code == 200
    assert await about(client, "Carla") == ["c4", "c3", "c2", "c1"]
    r = await client.post(
        "/v1/robots/ann/memories",
        json={"key": "c5", "content": "Carla moved to Porto.", "supersedes": ["c1"],
              "created_at": at(8)},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    assert await about(client, "Carla") == ["c5", "c4", "c3", "c2"]


async def test_the_entity_list_counts_what_the_robot_reads_most_first(client) -> None:
    await seed(client)
    assert await entities(client) == [
        ("carla", ["name", "person"], 4),
        ("ana", ["name"], 2),
        ("lisbon", ["name"], 2),
        ("inc-48213", ["code"], 1),
    ]
    assert (await entities(client, robot="bob"))[0] == ("carla", ["name", "person"], 5)
    assert await entities(client, kind="code") == [("inc-48213", ["code"], 1)]
    assert await entities(client, kind="person") == [("carla", ["name", "person"], 4)]
    r = await client.get("/v1/robots/ann/entities", params={"limit": 2})
    page = r.json()
    assert [e["entity"] for e in page["items"]] == ["carla", "ana"]
    assert page["items"][0]["latest_at"] == "2026-11-05T10:00:00Z"
    r = await client.get(
        "/v1/robots/ann/entities", params={"limit": 2, "cursor": page["next_cursor"]}
    )
    assert [e["entity"] for e in r.json()["items"]] == ["lisbon", "inc-48213"]
    assert r.json()["next_cursor"] is None


async def test_aliases_apply_to_every_read_at_once(client) -> None:
    await seed(client)
    await add(client, "ann", "n1", "Annie fixed the bike.", 9)
    assert (await client.get("/v1/entities/aliases")).json() == {"aliases": {}}
    r = await client.put(
        "/v1/entities/aliases", json={"aliases": {"Annie": "Ana", "Lis": "Lisbon"}}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"aliases": {"annie": "ana", "lis": "lisbon"}}
    assert (await client.get("/v1/entities/aliases")).json() == r.json()
    assert await about(client, "Ana") == ["n1", "a1", "c3"]
    assert await about(client, "annie") == ["n1", "a1", "c3"]
    assert ("ana", ["name"], 3) in await entities(client)
    assert "annie" not in [e[0] for e in await entities(client)]
    r = await client.put("/v1/entities/aliases", json={"aliases": {}})
    assert r.json() == {"aliases": {}}
    assert await about(client, "Ana") == ["a1", "c3"]
    assert await about(client, "Annie") == ["n1"]


async def test_bad_input_is_4xx_problem_json_and_writes_nothing(client) -> None:
    await seed(client)
    await client.put("/v1/entities/aliases", json={"aliases": {"annie": "ana"}})
    for body in (
        {"aliases": {"Ana": "ana"}},  # an alias of itself once normalised
        {"aliases": {"annie": "ana", "ana": "anna"}},  # a chain
        {"aliases": {"Annie": "ana", "annie": "anna"}},  # one alias, two entities
        {"aliases": {"'s": "ana"}},
        {"aliases": {"x": ""}},
        {"aliases": {"x": "y" * 101}},
        {"aliases": {"x": 1}},
        {"aliases": {"x\u0000": "y"}},
        {"aliases": ["x"]},
        {"other": {}},
    ):
        r = await client.put("/v1/entities/aliases", json=body)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), (body, r.text)
    assert (await client.get("/v1/entities/aliases")).json() == {"aliases": {"annie": "ana"}}
    for path, params, status in (
        ("/v1/robots/ann/entities/'s", {}, 422),
        ("/v1/robots/ann/entities/a%00", {}, 422),
        ("/v1/robots/ann/memories", {"entity": "a\u0000"}, 422),
        ("/v1/robots/ann/memories", {"entity": ""}, 422),
        ("/v1/robots/ann/entities/" + "x" * 201, {}, 422),
        ("/v1/robots/ann/entities/carla", {"limit": 0}, 422),
        ("/v1/robots/ann/entities/carla", {"cursor": "nope"}, 400),
        ("/v1/robots/ann/entities", {"cursor": "nope"}, 400),
        ("/v1/robots/ann/entities", {"kind": "place"}, 422),
        ("/v1/robots/ann/memories", {"entity": "carla", "as_of": at(9)}, 422),
        ("/v1/robots/a%20b/entities", {}, 422),
    ):
        r = await client.get(path, params=params)
        assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), (path, r.text)


async def test_a_sessions_promoted_turns_and_an_import_store_entities(
    client, ns, htm, tmp_path
) -> None:
    messages = [
        {"role": "user", "content": "Carla booked the flight to Oslo", "remember": True},
        {"role": "user", "content": "nothing to keep"},
    ]
    r = await client.post("/v1/robots/ann/sessions/s1/messages", json={"messages": messages})
    assert r.status_code == 201, r.text
    r = await client.delete("/v1/robots/ann/sessions/s1/messages")
    assert r.status_code == 200, r.text
    [promoted] = r.json()["promoted"]
    assert await about(client, "Oslo") == [promoted]
    await add(client, "ann", "c1", "Carla moved to Lisbon.", 1)
    out = tmp_path / "export.jsonl"
    assert htm("export", "--namespace", ns, "--out", str(out)).returncode == 0
    other = f"{ns}-b"
    done = htm("import", str(out), "--namespace", other)
    assert done.returncode == 0, done.stderr
    client.headers["X-Namespace"] = other
    assert await about(client, "Carla") == [promoted, "c1"]
    assert await stored(client, other, "c1") == (["carla", "lisbon"], ["name", "name"])
