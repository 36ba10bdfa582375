"""Superseding across audiences (issue 43): a successor must be read by every robot that
reads what it supersedes, else the add (or the PUT that would break it) is a 409 naming the
key and writes nothing; the detector never pairs such memories; and a `superseded_by` a robot
may not read (data from before the rule) is shown to it as null.

ann and bob are the group `team`; the pool `ops` grants ann and cat write, `other` ann."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.memories.test_supersede import state

PROBLEM = "application/problem+json"
NS: dict = {}
PRIVATE: dict = {"visibility": "private"}
FOR_BOB: dict = {"visibility": "private", "readers": ["bob"]}
GROUP: dict = {"visibility": "group"}
OPS: dict = {"pool": "ops"}


@pytest.fixture
async def world(client):
    r = await client.put("/v1/groups/team", json={"members": ["ann", "bob"]})
    assert r.status_code == 200, r.text
    for pool, writers in (("ops", ["ann", "cat"]), ("other", ["ann"])):
        r = await client.put(f"/v1/pools/{pool}", json={"type": "shared", "writers": writers})
        assert r.status_code == 200, r.text
    return client


async def add(client, robot: str, key: str, **body) -> dict:
    r = await client.post(f"/v1/robots/{robot}/memories", json={"key": key, **body})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.parametrize(
    ("old", "author", "new", "status"),
    [
        (NS, "ann", NS, 201),
        (PRIVATE, "ann", NS, 201),  # namespace-wide covers every audience
        (GROUP, "ann", NS, 201),
        (OPS, "cat", NS, 201),
        (NS, "ann", PRIVATE, 409),
        (NS, "ann", GROUP, 409),
        (NS, "ann", OPS, 409),
        (GROUP, "bob", GROUP, 201),  # the same group, another member
        (GROUP, "ann", FOR_BOB, 409),
        (OPS, "cat", OPS, 201),  # the same pool
        (OPS, "ann", {"pool": "other"}, 409),
        (OPS, "ann", GROUP, 409),
        (FOR_BOB, "ann", {"visibility": "private", "readers": ["cat", "bob"]}, 201),
        (PRIVATE, "ann", FOR_BOB, 201),  # more readers
        (FOR_BOB, "ann", PRIVATE, 409),  # bob would lose it
        (FOR_BOB, "ann", GROUP, 409),
    ],
)
async def test_a_successor_must_be_read_by_every_robot_that_reads_what_it_supersedes(
    world, ns, old, author, new, status
) -> None:
    await add(world, author, "home", content="Ana lives in Lisbon", **old)
    before = await state(world, ns)
    r = await world.post(
        "/v1/robots/ann/memories",
        json={"key": "home@2", "content": "Ana lives in Berlin", "supersedes": ["home"], **new},
    )
    assert r.status_code == status, r.text
    home = (await world.get(f"/v1/robots/{author}/memories/home")).json()
    if status == 201:
        assert r.json()["superseded"] == ["home"]
        assert home["superseded_by"] == "home@2"
        return
    assert r.headers["content-type"] == PROBLEM
    assert r.json()["keys"] == ["home"]
    assert r.json()["detail"] == (
        "'home@2' cannot supersede 'home': a robot that reads it could not read 'home@2' "
        "(a successor is read by everyone its predecessor is)"
    )
    assert await state(world, ns) == before
    assert (home["valid_to"], home["superseded_by"], home["version"]) == (None, None, 1)
    assert (await world.get("/v1/robots/ann/memories/home@2")).status_code == 404


async def test_a_batch_with_one_refused_supersede_writes_nothing(world, ns) -> None:
    await add(world, "ann", "a", content="first fact")
    await add(world, "ann", "b", content="second fact")
    before = await state(world, ns)
    r = await world.post(
        "/v1/robots/ann/memories/batch",
        json={
            "memories": [
                {"key": "a@2", "content": "first, changed", "supersedes": ["a"]},
                {"key": "b@2", "content": "second, mine", "supersedes": ["b"], **PRIVATE},
            ]
        },
    )
    assert r.status_code == 409, r.text
    assert r.json()["keys"] == ["b"]
    assert await state(world, ns) == before
    for key in ("a@2", "b@2"):
        assert (await world.get(f"/v1/robots/ann/memories/{key}")).status_code == 404


async def test_a_put_that_would_break_the_rule_is_refused_and_writes_nothing(world, ns) -> None:
    await add(world, "ann", "home", content="Ana lives in Lisbon", **FOR_BOB)
    await add(world, "ann", "home@2", content="Berlin", supersedes=["home"], **FOR_BOB)
    before = await state(world, ns)
    # The successor narrowed: bob would read the old fact ended, and not the new one.
    r = await world.put("/v1/robots/ann/memories/home@2", json={"content": "Berlin", **PRIVATE})
    assert r.status_code == 409, r.text
    assert (r.headers["content-type"], r.json()["keys"]) == (PROBLEM, ["home"])
    # The superseded one widened while it stays superseded (`valid_to`): cat would read it
    # ended, and not what ended it.
    home = (await world.get("/v1/robots/ann/memories/home")).json()
    r = await world.put(
        "/v1/robots/ann/memories/home",
        json={"content": "Ana lives in Lisbon", "visibility": "namespace",
              "valid_to": home["valid_to"]},
    )  # fmt: skip
    assert r.status_code == 409, r.text
    assert r.json()["detail"].startswith("'home@2' cannot supersede 'home': ")
    assert await state(world, ns) == before
    # Widening the successor, or the superseded one made current again (no `valid_to`), keeps
    # the rule.
    r = await world.put("/v1/robots/ann/memories/home@2", json={"content": "Berlin", **NS})
    assert r.status_code == 200, r.text
    r = await world.put(
        "/v1/robots/ann/memories/home", json={"content": "Lisbon", "visibility": "namespace"}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["valid_to"], r.json()["superseded_by"]) == (None, None)


async def test_the_detector_never_pairs_a_successor_that_does_not_cover(world) -> None:
    fact = {"metadata": {"subject": "ana", "attribute": "city"}}
    await add(world, "ann", "city", content="Ana lives in Lisbon", **fact)
    await add(world, "ann", "secret-city", content="Ana lives in Porto", **PRIVATE, **fact)
    for key, extra in (("city@2", PRIVATE), ("city@3", GROUP), ("city@4", OPS)):
        r = await add(
            world, "ann", key, content="Ana lives in Berlin", supersede="apply", **extra, **fact
        )
        assert (r["superseded"], r["supersede_proposals"]) == ([], []), key
    # A namespace-wide add finds only namespace-wide memories.
    r = await add(world, "ann", "city@5", content="Ana lives in Rome", supersede="propose", **fact)
    assert [p["key"] for p in r["supersede_proposals"]] == ["city"]
    r = await world.get("/v1/robots/ann/memories/secret-city")
    assert (r.json()["valid_to"], r.json()["superseded_by"]) == (None, None)


async def test_a_superseded_by_the_reader_may_not_read_is_null(world, ns) -> None:
    await add(world, "ann", "home", content="Ana lives in Lisbon")
    await add(world, "ann", "home-secret", content="Ana lives in Berlin", **PRIVATE)
    # Written before the rule: a namespace-wide fact ended by a private one.
    async with world.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(
            text("""
            UPDATE memory o SET valid_to = clock_timestamp(), version = o.version + 1,
                   superseded_by = (SELECT k.memory_id FROM memory_key k
                                    WHERE k.namespace_id = o.namespace_id
                                      AND k.key = 'home-secret')
            WHERE o.namespace_id = (SELECT id FROM namespace WHERE name = :ns)
              AND o.key = 'home'"""),
            {"ns": ns},
        )
    for robot, shown in (("ann", "home-secret"), ("bob", None), ("cat", None)):
        base = f"/v1/robots/{robot}/memories"
        answers = [
            (await world.get(f"{base}/home")).json(),
            (await world.get(f"{base}/home", params={"include_deleted": True})).json(),
            *(await world.get(base, params={"include": "superseded"})).json()["items"],
            *(await world.get(f"{base}/home/history")).json()["chain"],
        ]
        assert {(a["key"], a["superseded_by"]) for a in answers} == (
            {("home", shown), ("home-secret", None)} if shown else {("home", None)}
        ), robot
        assert all(a["valid_to"] is not None for a in answers if a["key"] == "home")
