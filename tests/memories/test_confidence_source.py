"""A memory's `confidence` and `source` (migration 0027): written on add, batch, PUT and
restore, kept by PATCH, read back everywhere, filtered on by list and recall, shown in
`explain`; a bad value is a 422 problem+json that writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.memories.test_memories_api import PROBLEM, count_rows

R = "/v1/robots/ann/memories"


async def add(client, key: str, content: str, **fields: Any) -> dict[str, Any]:
    r = await client.post(R, json={"key": key, "content": content, **fields})
    assert r.status_code == 201, r.text
    return r.json()


async def test_add_batch_and_reads_carry_confidence_and_source(client) -> None:
    added = await add(client, "a", "alpha fact", confidence=0.75, source="tool:web")
    assert (added["confidence"], added["source"]) == (0.75, "tool:web")
    r = await client.post(
        f"{R}/batch",
        json={
            "memories": [
                {"key": "b", "content": "beta fact", "confidence": 1, "source": "user"},
                {"key": "c", "content": "gamma fact"},
            ]
        },
    )
    assert r.status_code == 201, r.text
    assert [(m["key"], m["confidence"], m["source"]) for m in r.json()["memories"]] == [
        ("b", 1.0, "user"),
        ("c", None, None),
    ]
    got = (await client.get(f"{R}/a")).json()
    assert (got["confidence"], got["source"]) == (0.75, "tool:web")
    items = (await client.get(R)).json()["items"]
    assert [(m["key"], m["confidence"], m["source"]) for m in items] == [
        ("c", None, None),
        ("b", 1.0, "user"),
        ("a", 0.75, "tool:web"),
    ]


async def test_put_replaces_them_patch_keeps_them_and_versions_remember_them(client) -> None:
    await add(client, "k", "the fact", confidence=0.5, source="inference")
    r = await client.put(
        f"{R}/k", json={"content": "the fact", "confidence": 0.9, "source": "user"}
    )
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["confidence"], r.json()["source"]) == (2, 0.9, "user")
    # The same PUT again writes nothing.
    again = await client.put(
        f"{R}/k", json={"content": "the fact", "confidence": 0.9, "source": "user"}
    )
    assert again.json()["version"] == 2
    r = await client.patch(f"{R}/k", json={"boost": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["confidence"], r.json()["source"]) == (3, 0.9, "user")
    # A PUT is the whole memory: leaving them out clears them.
    r = await client.put(f"{R}/k", json={"content": "the fact"})
    assert (r.json()["version"], r.json()["confidence"], r.json()["source"]) == (4, None, None)
    versions = (await client.get(f"{R}/k/versions")).json()["versions"]
    assert [(v["version"], v["confidence"], v["source"]) for v in versions] == [
        (4, None, None),
        (3, 0.9, "user"),
        (2, 0.9, "user"),
        (1, 0.5, "inference"),
    ]
    r = await client.post(f"{R}/k/versions/1/restore")
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["confidence"], r.json()["source"]) == (
        5,
        0.5,
        "inference",
    )


async def test_patch_sets_either_and_keeps_what_it_does_not_name(client) -> None:
    await add(client, "k", "the fact", importance=2, confidence=0.5, source="inference")

    async def patch(body: dict[str, Any]) -> tuple[Any, ...]:
        r = await client.patch(f"{R}/k", json=body)
        assert r.status_code == 200, r.text
        m = r.json()
        return (m["version"], m["importance"], m["confidence"], m["source"])

    assert await patch({"confidence": 0.75}) == (2, 2, 0.75, "inference")
    assert await patch({"source": "user", "boost": 1}) == (3, 3, 0.75, "user")
    assert await patch({"confidence": None}) == (4, 3, None, "user")
    assert await patch({"source": "user"}) == (4, 3, None, "user")  # nothing changed: no version
    for body in ({}, {"importance": 1, "boost": 1}, {"confidence": 2}, {"source": "-x"}):
        r = await client.patch(f"{R}/k", json=body)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), body
    got = (await client.get(f"{R}/k")).json()
    assert (got["version"], got["importance"], got["confidence"], got["source"]) == (
        4,
        3,
        None,
        "user",
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"confidence": 1.5}, "confidence"),
        ({"confidence": -0.01}, "confidence"),
        ({"confidence": "high"}, "confidence"),
        ({"source": ""}, "source"),
        ({"source": "-web"}, "source"),
        ({"source": "web\nsearch"}, "source"),
        ({"source": "s" * 101}, "source"),
        ({"source": 7}, "source"),
    ],
)
async def test_a_bad_confidence_or_source_is_422_and_writes_nothing(
    client, ns, fields, field
) -> None:
    async def refused(r: Any, prefix: str) -> None:
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == PROBLEM
        assert any(e["field"].startswith(prefix) for e in r.json()["errors"]), r.json()

    await refused(await client.post(R, json={"content": "x", **fields}), f"body.{field}")
    batch = {"memories": [{"content": "fine"}, {"content": "x", **fields}]}
    await refused(await client.post(f"{R}/batch", json=batch), f"body.memories.1.{field}")
    assert await count_rows(client, ns) == 0

    await add(client, "kept", "as it was", confidence=0.5, source="user")
    await refused(await client.put(f"{R}/kept", json={"content": "new", **fields}), f"body.{field}")
    got = (await client.get(f"{R}/kept")).json()
    assert (got["content"], got["version"], got["confidence"], got["source"]) == (
        "as it was",
        1,
        0.5,
        "user",
    )


async def seed(client) -> None:
    rows = [
        ("sure-web", 0.9, "tool:web"),
        ("unsure-web", 0.2, "tool:web"),
        ("sure-user", 1.0, "user"),
        ("said-nothing", None, None),
        ("half-import", 0.5, "import"),
    ]
    for i, (key, confidence, source) in enumerate(rows):
        fields = {"created_at": f"2025-01-0{i + 1}T00:00:00Z"}
        if confidence is not None:
            fields |= {"confidence": confidence, "source": source}
        await add(client, key, f"deploy note {key}", **fields)


async def test_list_filters_on_min_confidence_and_sources(client) -> None:
    await seed(client)

    async def keys(q: str) -> list[str]:
        r = await client.get(f"{R}?{q}")
        assert r.status_code == 200, r.text
        return [m["key"] for m in r.json()["items"]]

    assert await keys("min_confidence=0.5") == ["half-import", "sure-user", "sure-web"]
    assert await keys("min_confidence=0") == ["half-import", "sure-user", "unsure-web", "sure-web"]
    assert await keys("source=tool:web") == ["unsure-web", "sure-web"]
    assert await keys("source=user&source=import") == ["half-import", "sure-user"]
    assert await keys("source=tool:web&min_confidence=0.5") == ["sure-web"]
    for bad in ("min_confidence=1.1", "min_confidence=x", "source=-x"):
        r = await client.get(f"{R}?{bad}")
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), bad


async def test_recall_filters_on_them_and_explain_shows_them(client) -> None:
    await seed(client)

    async def recall(**filters: Any) -> list[dict[str, Any]]:
        body = {
            "query": "deploy note",
            "strategy": "fulltext",
            "limit": 10,
            "load_into_working_memory": False,
            "explain": True,
            "filters": filters,
        }
        r = await client.post("/v1/robots/ann/recall", json=body)
        assert r.status_code == 200, r.text
        return r.json()["hits"]

    every = await recall()
    assert sorted((h["key"], h["confidence"], h["source"]) for h in every) == [
        ("half-import", 0.5, "import"),
        ("said-nothing", None, None),
        ("sure-user", 1.0, "user"),
        ("sure-web", 0.9, "tool:web"),
        ("unsure-web", 0.2, "tool:web"),
    ]
    assert {h["key"]: (h["explain"]["confidence"], h["explain"]["source"]) for h in every} == {
        "half-import": (0.5, "import"),
        "said-nothing": (None, None),
        "sure-user": (1.0, "user"),
        "sure-web": (0.9, "tool:web"),
        "unsure-web": (0.2, "tool:web"),
    }
    assert sorted(h["key"] for h in await recall(min_confidence=0.9)) == ["sure-user", "sure-web"]
    assert sorted(h["key"] for h in await recall(sources=["tool:web", "import"])) == [
        "half-import",
        "sure-web",
        "unsure-web",
    ]
    assert [h["key"] for h in await recall(sources=["import"], min_confidence=0.6)] == []
    r = await client.post(
        "/v1/robots/ann/recall", json={"query": "x", "filters": {"min_confidence": 2}}
    )
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM)
