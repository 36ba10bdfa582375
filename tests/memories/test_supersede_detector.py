"""The supersession detector (issue 33): its deterministic rules (subject/attribute, key
family), the semantic rule, and the LLM's confirmation against a real local server speaking
the chat-completions API; proposed or applied as the add or the deployment says."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import text

DIM = 384


def vector(angle: float) -> list[float]:
    """A unit vector at `angle` radians from e0 in the (e0, e1) plane."""
    v = [0.0] * DIM
    v[0], v[1] = math.cos(angle), math.sin(angle)
    return v


async def add(client, **body) -> dict:
    r = await client.post("/v1/robots/a/memories", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def found(added: dict) -> list[tuple]:
    return [(p["key"], p["rule"]) for p in added["supersede_proposals"]]


async def current(client) -> list[str]:
    r = await client.get("/v1/robots/a/memories")
    return sorted(m["key"] for m in r.json()["items"])


CITY = {"subject": "ana", "attribute": "city"}


async def test_same_subject_and_attribute_is_proposed_then_applied_when_asked(client) -> None:
    await add(client, key="c1", content="Ana lives in Lisbon", metadata=CITY)
    await add(client, key="job", content="Ana is a nurse", metadata={**CITY, "attribute": "job"})
    await add(client, key="bo", content="Bo lives in Rome", metadata={**CITY, "subject": "bo"})
    second = await add(client, key="c2", content="Ana lives in Berlin", metadata=CITY)
    assert (found(second), second["superseded"]) == ([("c1", "subject_attribute")], [])
    assert second["supersede_proposals"][0]["content"] == "Ana lives in Lisbon"
    assert await current(client) == ["bo", "c1", "c2", "job"]
    third = await add(
        client, key="c3", content="Ana lives in Oslo", metadata=CITY, supersede="apply"
    )
    assert (found(third), third["superseded"]) == ([], ["c1", "c2"])
    assert await current(client) == ["bo", "c3", "job"]
    off = await add(client, key="c4", content="Ana lives in Bonn", metadata=CITY, supersede="off")
    assert (found(off), off["superseded"]) == ([], [])


async def test_the_key_family_rule_and_a_deployment_that_applies(app_factory, ns) -> None:
    async with app_factory(supersede="apply") as client:
        client.headers["X-Namespace"] = ns
        await add(client, key="plan", content="Plan A")
        await add(client, key="plan@v2", content="Plan B")
        await add(client, key="planet", content="Mars")  # not the family
        await add(client, key="plan@v2@x", content="Plan C")  # its family is plan@v2
        assert await current(client) == ["plan@v2@x", "planet"]
        r = await client.get("/v1/robots/a/memories/plan@v2@x/history")
        assert [(m["key"], m["depth"]) for m in r.json()["chain"]] == [
            ("plan", -2),
            ("plan@v2", -1),
            ("plan@v2@x", 0),
        ]
        # An explicit supersedes and the detector's finding together.
        await add(client, key="x", content="X")
        both = await add(client, key="plan@v3", content="Plan D", supersedes=["x"])
        assert both["superseded"] == ["x", "plan@v2@x"]  # plan@... is plan's family
        assert await current(client) == ["plan@v3", "planet"]


async def test_the_semantic_rule_without_an_llm_only_proposes(app_factory, ns) -> None:
    async with app_factory(supersede="apply", supersede_threshold=0.9) as client:
        client.headers["X-Namespace"] = ns
        await add(client, key="near", content="Ana stays in Lisbon", embedding=vector(0.0))
        await add(client, key="typed", content="x", type="note", embedding=vector(0.1))
        new = await add(client, key="new", content="Ana stays in Berlin", embedding=vector(0.2))
        [p] = new["supersede_proposals"]
        assert (p["key"], p["rule"]) == ("near", "semantic")
        assert p["similarity"] == pytest.approx(math.cos(0.2), abs=1e-4)  # halfvec storage
        assert new["superseded"] == []
        far = await add(client, key="far", content="Ana likes tea", embedding=vector(1.0))
        assert found(far) == []  # cos(0.8) = 0.70 < 0.9 from the nearest, `new`
        assert await current(client) == ["far", "near", "new", "typed"]


def chat(content: dict) -> tuple[int, dict]:
    return 200, {"choices": [{"message": {"role": "assistant", "content": json.dumps(content)}}]}


@pytest.fixture
async def llm_client(app_factory, ns, stub):
    async with app_factory(
        supersede="apply",
        supersede_threshold=0.9,
        llm_provider="openai",
        llm_url=stub.url,
        enrich_interval_s=3600,
    ) as client:
        client.headers["X-Namespace"] = ns
        yield client
        # Nothing is left for another test's enrichment worker.
        async with client.app.state.components.sessionmaker() as s, s.begin():
            await s.execute(
                text(
                    "UPDATE memory SET enrichment_status = 'done' FROM namespace n "
                    "WHERE n.id = memory.namespace_id AND n.name = :ns"
                ),
                {"ns": ns},
            )


async def test_the_llm_confirms_a_semantic_supersede(llm_client, stub) -> None:
    def judge(req) -> tuple[int, dict]:
        pair = json.loads(req.body["messages"][1]["content"])
        return chat({"contradicts": "Berlin" in pair["second"]})

    stub.reply = judge
    await add(llm_client, key="old", content="Ana stays in Lisbon", embedding=vector(0.0))
    new = await add(llm_client, key="new", content="Ana stays in Berlin", embedding=vector(0.2))
    assert (new["superseded"], found(new)) == (["old"], [])
    [asked] = [r for r in stub.requests if r.path.endswith("chat/completions")]
    assert json.loads(asked.body["messages"][1]["content"]) == {
        "first": "Ana stays in Lisbon",
        "second": "Ana stays in Berlin",
    }
    # The LLM says no: nothing proposed, nothing superseded.
    same = await add(llm_client, key="same", content="Ana lives there", embedding=vector(0.3))
    assert (same["superseded"], found(same)) == ([], [])
    assert await current(llm_client) == ["new", "same"]


async def test_an_llm_failure_supersedes_nothing(llm_client, stub) -> None:
    stub.reply = lambda req: (500, {"error": "down"})
    await add(llm_client, key="old", content="Ana stays in Lisbon", embedding=vector(0.0))
    new = await add(llm_client, key="new", content="Ana stays in Berlin", embedding=vector(0.2))
    assert (new["superseded"], found(new)) == ([], [])
    assert await current(llm_client) == ["new", "old"]
