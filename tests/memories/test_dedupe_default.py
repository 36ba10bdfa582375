"""The deployment's default near-duplicate rule is `exact` (issue 31): an agent that adds what
it learned on every run keeps one memory per fact; a conversation's turns are events and are
all kept; an add of new content keeps group commit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.config import Settings


@pytest.fixture
async def client(app_factory, ns: str) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    """The suite's app with the deployment's default rule (the suite pins `off`)."""
    async with app_factory(dedupe=Settings(_env_file=None).dedupe) as c:  # type: ignore[call-arg]
        c.headers["X-Namespace"] = ns
        yield c


async def test_exact_is_the_default_rule() -> None:
    assert Settings(_env_file=None).dedupe == "exact"  # type: ignore[call-arg]


async def test_adding_a_fact_again_reinforces_the_first(client: httpx.AsyncClient) -> None:
    first = await client.post(
        "/v1/robots/a/memories", json={"key": "f1", "content": "Staging runs PostgreSQL 18"}
    )
    assert first.status_code == 201, first.text
    again = await client.post(
        "/v1/robots/b/memories", json={"content": "Staging runs PostgreSQL 18", "importance": 4}
    )
    assert again.status_code == 200, again.text
    assert (again.json()["created"], again.json()["duplicate_of"]) == (False, "f1")
    listed = (await client.get("/v1/robots/a/memories", params={"limit": 10})).json()["items"]
    assert [(m["key"], m["importance"]) for m in listed] == [("f1", 4.0)]
    # A batch repeating itself stores one.
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"key": "g1", "content": "x"}, {"key": "g2", "content": "x"}]},
    )
    assert r.status_code == 201, r.text
    assert [(m["key"], m["created"], m["duplicate_of"]) for m in r.json()["memories"]] == [
        ("g1", True, None),
        ("g1", False, "g1"),
    ]


async def test_turns_of_a_conversation_are_all_kept(client: httpx.AsyncClient) -> None:
    turns = [
        {"key": f"t{i}", "content": "Hmm, yeah.", "metadata": {"speaker": "Leo", "session": "s1"}}
        for i in range(3)
    ]
    r = await client.post("/v1/robots/a/memories/batch", json={"memories": turns})
    assert r.status_code == 201, r.text
    assert [m["created"] for m in r.json()["memories"]] == [True, True, True]
    # Asked for per add, the rule still applies to a turn.
    r = await client.post(
        "/v1/robots/a/memories", json={**turns[0], "key": "t9", "dedupe": "exact"}
    )
    assert (r.status_code, r.json()["duplicate_of"]) == (200, "t0")


async def test_an_add_of_new_content_is_group_committed(client: httpx.AsyncClient) -> None:
    adds = client.app.state.components.group_commit  # type: ignore[attr-defined]
    before = adds.adds
    r = await client.post("/v1/robots/a/memories", json={"content": "something new"})
    assert r.status_code == 201, r.text
    assert adds.adds == before + 1
