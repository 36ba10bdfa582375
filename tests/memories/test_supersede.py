"""Supersede (issue 33): through the write protocol (holders let go, versions kept), its
refusals writing nothing, the chain, concurrency, and un-superseding by PUT."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from tests.working_memory.tiers import disagreements

PROBLEM = "application/problem+json"


async def add(client, robot: str = "a", **body) -> dict:
    r = await client.post(f"/v1/robots/{robot}/memories", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def working_memory(client, robot: str) -> list[str]:
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    return sorted(i["key"] for i in r.json()["items"])


async def recalled(client, robot: str, **extra) -> list[str]:
    body = {"query": "Ana lives", "strategy": "fulltext", "load_into_working_memory": False}
    r = await client.post(f"/v1/robots/{robot}/recall", json={**body, **extra})
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


async def state(client, ns: str) -> tuple:
    """(memories, versions kept, supersede events) of the namespace."""
    async with client.app.state.components.sessionmaker() as s:
        row = (
            await s.execute(
                text("""
                SELECT (SELECT count(*) FROM memory m WHERE m.namespace_id = n.id),
                       (SELECT count(*) FROM memory_version v JOIN memory m ON m.id = v.memory_id
                        WHERE m.namespace_id = n.id),
                       (SELECT count(*) FROM memory_event e
                        WHERE e.namespace_id = n.id AND e.kind = 'supersede')
                FROM namespace n WHERE n.name = :ns"""),
                {"ns": ns},
            )
        ).one()
    return tuple(row)


async def test_a_supersede_ends_the_old_fact_and_every_holder_lets_it_go(client, ns) -> None:
    await add(client, key="home", content="Ana lives in Lisbon")
    # b recalls it into its working memory.
    r = await client.post("/v1/robots/b/recall", json={"query": "Lisbon", "strategy": "fulltext"})
    assert [h["key"] for h in r.json()["hits"]] == ["home"]
    assert await working_memory(client, "a") == ["home"]
    assert await working_memory(client, "b") == ["home"]

    new = await add(client, key="home@2", content="Ana lives in Berlin now", supersedes=["home"])
    assert (new["superseded"], new["working_memory"]["admitted"]) == (["home"], True)
    assert await working_memory(client, "a") == ["home@2"]
    assert await working_memory(client, "b") == []

    old = (await client.get("/v1/robots/c/memories/home")).json()
    assert (old["valid_to"], old["superseded_by"], old["version"]) == (
        new["valid_from"],
        "home@2",
        2,
    )
    r = await client.get("/v1/robots/a/memories/home/versions")
    assert [(v["version"], v["valid_to"], v["current"]) for v in r.json()["versions"]] == [
        (2, new["valid_from"], True),
        (1, None, False),
    ]
    assert await recalled(client, "c") == ["home@2"]
    assert sorted(await recalled(client, "c", include=["superseded"])) == ["home", "home@2"]
    assert await state(client, ns) == (2, 1, 1)
    # The mirror agrees with Redis for both robots (the tier audit).
    assert await disagreements(client, ["a", "b"]) == {}


async def test_the_history_lists_the_chain_oldest_first_from_any_link(client) -> None:
    await add(client, key="city", content="Ana lives in Lisbon")
    await add(client, key="city@2", content="Ana lives in Berlin", supersedes=["city"])
    await add(client, key="city@3", content="Ana lives in Oslo", supersedes=["city@2"])
    await add(client, key="other", content="Ana likes tea")
    want = [("city", -2), ("city@2", -1), ("city@3", 0)]
    for key, depth in want:
        r = await client.get(f"/v1/robots/a/memories/{key}/history")
        assert r.status_code == 200, r.text
        got = [(link["key"], link["depth"]) for link in r.json()["chain"]]
        assert got == [(k, d - depth) for k, d in want]
    r = await client.get("/v1/robots/a/memories/other/history")
    assert [(link["key"], link["depth"]) for link in r.json()["chain"]] == [("other", 0)]
    r = await client.get("/v1/robots/a/memories/city@3/history", params={"limit": 1})
    assert [link["key"] for link in r.json()["chain"]] == ["city@2", "city@3"]
    assert (await client.get("/v1/robots/a/memories/nope/history")).status_code == 404


async def test_refused_supersedes_write_nothing(client, ns) -> None:
    await add(client, key="home", content="Ana lives in Lisbon")
    await add(client, key="home@2", content="Ana lives in Berlin", supersedes=["home"])
    before = await state(client, ns)
    cases = [
        ({"key": "x", "content": "y", "supersedes": ["home"]}, 409),  # already superseded
        ({"key": "x", "content": "y", "supersedes": ["missing"]}, 404),
        ({"key": "x", "content": "y", "supersedes": ["home@2", "home@2"]}, 422),
        ({"key": "x", "content": "y", "supersedes": ["bad/key"]}, 422),
        ({"key": "home@2", "content": "y", "supersedes": ["home@2"]}, 422),  # itself
        (  # starts before what it would supersede
            {
                "key": "x",
                "content": "y",
                "valid_from": "2000-01-01T00:00:00Z",
                "supersedes": ["home@2"],
            },
            422,
        ),
        ({"key": "x", "content": "y", "supersedes": [f"k{i}" for i in range(21)]}, 422),
    ]
    for body, status in cases:
        r = await client.post("/v1/robots/n/memories", json=body)
        assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), (body, r.text)
    r = await client.post(
        "/v1/robots/n/memories/batch",
        json={
            "memories": [
                {"key": "p", "content": "p"},
                {"key": "q", "content": "q", "supersedes": ["p"]},
            ]
        },
    )
    assert r.status_code == 422, r.text
    assert await state(client, ns) == before
    assert (await client.get("/v1/robots/n")).status_code == 404  # not even registered


async def test_concurrent_supersedes_of_one_key_one_wins(client) -> None:
    await add(client, key="home", content="Ana lives in Lisbon")

    async def supersede(i: int) -> int:
        r = await client.post(
            f"/v1/robots/r{i}/memories",
            json={"key": f"home@{i}", "content": f"Ana lives in city {i}", "supersedes": ["home"]},
        )
        return r.status_code

    statuses = await asyncio.gather(*(supersede(i) for i in range(6)))
    assert sorted(statuses) == [201] + [409] * 5
    winner = statuses.index(201)
    old = (await client.get("/v1/robots/a/memories/home")).json()
    assert old["superseded_by"] == f"home@{winner}"
    assert await recalled(client, "a") == [f"home@{winner}"]


async def test_a_put_without_valid_to_makes_a_superseded_memory_current_again(client) -> None:
    await add(client, key="home", content="Ana lives in Lisbon")
    await add(client, key="home@2", content="Ana lives in Berlin", supersedes=["home"])
    r = await client.put("/v1/robots/a/memories/home", json={"content": "Ana lives in Lisbon"})
    assert r.status_code == 200, r.text
    assert (r.json()["valid_to"], r.json()["superseded_by"], r.json()["version"]) == (
        None,
        None,
        3,
    )
    assert sorted(await recalled(client, "a")) == ["home", "home@2"]
    # A PATCH of its importance keeps a memory's validity.
    await add(client, key="x", content="Ana lived in Porto", valid_to="2999-01-01T00:00:00Z")
    r = await client.patch("/v1/robots/a/memories/x", json={"importance": 4})
    assert r.status_code == 200, r.text
    assert r.json()["valid_to"] == "2999-01-01T00:00:00Z"


async def test_a_superseded_fact_said_again_is_a_new_memory_not_a_duplicate(client) -> None:
    v = [0.5] * 384
    await add(client, key="home", content="Ana lives in Lisbon", embedding=v)
    await add(client, key="home@2", content="Ana lives in Berlin", supersedes=["home"])
    # semantic: the same vector, other words; exact: the same words. Only proposed: the
    # detector's statement rule would otherwise supersede home@2 by default.
    for body in (
        {"content": "Ana is living in Lisbon", "dedupe": "semantic", "embedding": v},
        {"content": "Ana lives in Lisbon", "dedupe": "exact"},
    ):
        body["supersede"] = "propose"
        r = await client.post("/v1/robots/a/memories", json=body)
        assert (r.status_code, r.json()["duplicate_of"]) == (201, None), r.text
    body = {"content": "Ana lives in Berlin", "dedupe": "exact", "supersede": "propose"}
    r = await client.post("/v1/robots/a/memories", json=body)
    assert (r.status_code, r.json()["duplicate_of"]) == (200, "home@2")
