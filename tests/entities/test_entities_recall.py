"""Recall's `filters.entities`: the hits naming any of the entities (aliases standing for
theirs), through every strategy, with visibility as recall applies it; bad names are 422."""

from __future__ import annotations

import math
from typing import Any

PROBLEM = "application/problem+json"
DIM = 384


def at_cosine(c: float) -> list[float]:
    """A unit vector at cosine `c` to the first axis."""
    v = [0.0] * DIM
    v[0], v[1] = c, math.sqrt(1 - c * c)
    return v


QUERY = [1.0] + [0.0] * (DIM - 1)
MEMORIES = [  # key, content, cosine to the query
    ("c1", "Carla moved to Lisbon for the pottery school", 0.9),
    ("a1", "Ana moved to Lisbon for the pottery school", 0.95),
    ("c2", "the pottery school hired Carla", 0.7),
    ("b1", "Bob runs the pottery school", 0.99),
    ("x1", "Annie glazes pots at the pottery school", 0.8),
]


async def seed(client: Any) -> None:
    body = {
        "memories": [
            {"key": k, "content": c, "embedding": at_cosine(cos)} for k, c, cos in MEMORIES
        ]
    }
    r = await client.post("/v1/robots/ann/memories/batch", json=body)
    assert r.status_code == 201, r.text
    r = await client.post(
        "/v1/robots/bob/memories",
        json={"key": "p1", "content": "Carla's pottery school secret", "visibility": "private",
              "embedding": at_cosine(1.0)},
    )  # fmt: skip
    assert r.status_code == 201, r.text


async def recalled(client: Any, strategy: str, entities: Any, robot: str = "ann") -> list[str]:
    body = {"query": "pottery school", "strategy": strategy, "limit": 10,
            "filters": {"entities": entities}, "load_into_working_memory": False}  # fmt: skip
    if strategy != "fulltext":
        body["embedding"] = QUERY
    r = await client.post(f"/v1/robots/{robot}/recall", json=body)
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


async def test_recall_keeps_the_hits_naming_any_of_the_entities(client) -> None:
    await seed(client)
    assert await recalled(client, "vector", ["Carla"]) == ["c1", "c2"]
    assert await recalled(client, "vector", ["carla", "BOB"]) == ["b1", "c1", "c2"]
    assert await recalled(client, "vector", ["Carla"], robot="bob") == ["p1", "c1", "c2"]
    assert await recalled(client, "vector", ["Lisbon"]) == ["a1", "c1"]
    assert await recalled(client, "vector", ["Nobody"]) == []
    assert sorted(await recalled(client, "fulltext", ["Carla"])) == ["c1", "c2"]
    assert sorted(await recalled(client, "hybrid", ["Carla"])) == ["c1", "c2"]
    assert sorted(await recalled(client, "hybrid", None)) == ["a1", "b1", "c1", "c2", "x1"]


async def test_an_alias_recalls_its_entitys_memories(client) -> None:
    await seed(client)
    r = await client.put("/v1/entities/aliases", json={"aliases": {"Annie": "Ana"}})
    assert r.status_code == 200, r.text
    assert await recalled(client, "vector", ["Ana"]) == ["a1", "x1"]
    assert await recalled(client, "vector", ["annie"]) == ["a1", "x1"]


async def test_bad_entities_are_422_problem_json(client) -> None:
    for entities in (["'s"], [""], ["x" * 201], ["a\u0000"], "Carla", [1], ["a"] * 21):
        r = await client.post(
            "/v1/robots/ann/recall",
            json={"query": "x", "strategy": "fulltext", "filters": {"entities": entities}},
        )
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), (entities, r.text)


async def test_expand_entities_adds_a_second_hop_after_the_hits(client) -> None:
    memories = [  # key, content, cosine to the query, visibility, speaker
        ("q1", "Carla met her friend Ana in Lisbon", 0.95, "namespace", "Dee"),
        ("n1", "the museum opens at nine", 0.9, "namespace", None),
        ("n2", "the museum closes at six", 0.85, "namespace", None),
        ("n3", "the museum is free on sundays", 0.8, "namespace", None),
        ("c2", "Carla likes green tea in Lisbon", 0.3, "namespace", None),
        ("d1", "I play chess on Fridays", 0.25, "namespace", "Dee"),
        ("a1", "Ana works at the Gulbenkian museum", 0.1, "private", None),
    ]
    for key, content, cos, visibility, speaker in memories:
        r = await client.post(
            "/v1/robots/ann/memories",
            json={"key": key, "content": content, "embedding": at_cosine(cos),
                  "visibility": visibility, "metadata": {"speaker": speaker} if speaker else {}},
        )  # fmt: skip
        assert r.status_code == 201, r.text
    body = {"query": "Where does the friend Carla met in Lisbon work?", "strategy": "vector",
            "embedding": QUERY, "limit": 4, "load_into_working_memory": False}  # fmt: skip

    async def hits(robot: str, **extra: Any) -> list[tuple[str, Any]]:
        r = await client.post(f"/v1/robots/{robot}/recall", json={**body, **extra})
        assert r.status_code == 200, r.text
        return [(h["key"], h["via"]) for h in r.json()["hits"]]

    assert await hits("ann") == [("q1", None), ("n1", None), ("n2", None), ("n3", None)]
    # q1 names Carla and Lisbon (the question does too) and its speaker Dee (a speaker names
    # every turn of theirs): only Ana is a second hop.
    assert await hits("ann", expand="entities") == [
        ("q1", None),
        ("n1", None),
        ("n2", None),
        ("a1", {"key": "q1", "type": "entity", "entity": "ana"}),
    ]
    # bob may not read a1: nothing is added.
    assert await hits("bob", expand="entities") == [
        ("q1", None),
        ("n1", None),
        ("n2", None),
        ("n3", None),
    ]
    # An alias: Annie's turns are Ana's.
    await client.post(
        "/v1/robots/ann/memories",
        json={"key": "x1", "content": "Annie paints", "embedding": at_cosine(0.5)},
    )
    await client.put("/v1/entities/aliases", json={"aliases": {"Annie": "Ana"}})
    assert await hits("ann", expand="entities") == [
        ("q1", None),
        ("n1", None),
        ("x1", {"key": "q1", "type": "entity", "entity": "ana"}),
        ("a1", {"key": "q1", "type": "entity", "entity": "ana"}),
    ]
