"""The LLM enrichment worker against a real local chat-completions server: tags from the
ontology, propositions as child memories, retries through an outage, a terminal failure, and
nothing at all without an LLM."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

LONG = (
    "Staging runs PostgreSQL 18 with pgvector 0.8. It was upgraded in May by the platform "
    "team, and the old cluster was kept for a week as a fallback."
)


def chat(content: dict | str) -> tuple[int, dict]:
    body = content if isinstance(content, str) else json.dumps(content)
    return 200, {"choices": [{"message": {"role": "assistant", "content": body}}]}


def model(request) -> tuple[int, dict]:
    system = request.body["messages"][0]["content"]
    if "hierarchical tags" in system:
        return chat({"tags": ["Database:PostgreSQL", "ops", "bad tag!", "database:postgresql"]})
    return chat({"propositions": ["Staging runs PostgreSQL 18.", "", "pgvector is at 0.8."]})


@pytest.fixture
async def client(app_factory, ns, stub):
    # The enrichment queue spans every namespace: memories other tests' apps queued (with an
    # LLM configured) would be leased by this test's passes. None is left pending.
    async with app_factory() as other:
        async with other.app.state.components.sessionmaker() as s, s.begin():
            await s.execute(
                text(
                    "UPDATE memory SET enrichment_status = 'done' "
                    "WHERE enrichment_status = 'pending'"
                )
            )
    async with app_factory(
        llm_provider="openai",
        llm_url=stub.url,
        enrich_interval_s=3600,  # the tests run the passes
        enrich_propositions_min_tokens=20,
    ) as c:
        c.headers["X-Namespace"] = ns
        yield c


async def state(client, key: str) -> tuple:
    async with client.app.state.components.sessionmaker() as s:
        row = (
            await s.execute(
                text(
                    "SELECT m.enrichment_status, m.enrichment_attempts, m.enrichment_error "
                    "FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                    "WHERE n.name = :ns AND m.key = :key"
                ),
                {"ns": client.headers["X-Namespace"], "key": key},
            )
        ).one()
    return tuple(row)


async def due_now(client) -> None:
    """This test's memories waiting for a retry are due now."""
    async with client.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(
            text(
                "UPDATE memory SET enrichment_next_at = now() - interval '1 s' "
                "WHERE enrichment_status = 'pending' AND namespace_id = "
                "(SELECT id FROM namespace WHERE name = :ns)"
            ),
            {"ns": client.headers["X-Namespace"]},
        )


async def run(client) -> int:
    return await client.app.state.components.enrichment_worker.run_once()


async def test_tags_from_the_ontology_and_propositions_as_children(client, stub) -> None:
    stub.reply = model
    await client.post(
        "/v1/robots/a/memories",
        json={"key": "short", "content": "Pager duty.", "tags": ["ops:oncall"]},
    )
    r = await client.post(
        "/v1/robots/a/memories", json={"key": "long", "content": LONG, "importance": 4}
    )
    long_id = r.json()["id"]
    assert await state(client, "long") == ("pending", 0, None)

    assert await run(client) == 2
    short = (await client.get("/v1/robots/a/memories/short")).json()
    assert (short["tags"], short["version"]) == (["ops:oncall", "database:postgresql", "ops"], 2)
    versions = (await client.get("/v1/robots/a/memories/short/versions")).json()["versions"]
    assert versions[0]["changed_by"] == "htm-enrich"
    # The model was offered the namespace's ontology, most used first.
    first_system = stub.requests[0].body["messages"][0]["content"]
    assert first_system.endswith("Existing tags:\nops\nops:oncall")
    # Only the long memory has propositions: children, linked to it, not enriched again.
    props = (await client.get("/v1/robots/a/memories", params={"type": "proposition"})).json()[
        "items"
    ]
    assert sorted((p["key"], p["content"]) for p in props) == [
        (f"prop-{long_id}-1", "Staging runs PostgreSQL 18."),
        (f"prop-{long_id}-2", "pgvector is at 0.8."),
    ]
    assert {
        (p["author"], p["importance"], json.dumps(p["metadata"], sort_keys=True)) for p in props
    } == {("a", 4.0, json.dumps({"source_id": long_id, "source_key": "long"}, sort_keys=True))}
    assert await state(client, f"prop-{long_id}-1") == (None, 0, None)
    assert await state(client, "long") == ("done", 0, None)
    assert len(stub.requests) == 3  # tags twice, propositions once
    assert await run(client) == 0
    assert len(stub.requests) == 3
    # Not in working memory: enrichment never places anything.
    wm = (await client.get("/v1/robots/a/working-memory")).json()["items"]
    assert sorted(i["key"] for i in wm) == ["long", "short"]


async def test_an_outage_loses_nothing_and_the_next_pass_finishes(client, stub) -> None:
    stub.reply = lambda _r: (503, {"error": "down"})
    await client.post("/v1/robots/a/memories", json={"key": "k", "content": "Pager duty."})
    assert await run(client) == 0
    status, attempts, error = await state(client, "k")
    assert (status, attempts) == ("pending", 1)
    assert "HTTP 503" in error
    assert await run(client) == 0  # backing off: not leased again yet
    assert len(stub.requests) == 1
    stub.reply = model
    await due_now(client)
    assert await run(client) == 1
    assert await state(client, "k") == ("done", 1, None)
    got = (await client.get("/v1/robots/a/memories/k")).json()
    assert got["tags"] == ["database:postgresql", "ops"]


async def test_an_unusable_reply_fails_for_good_after_five_attempts(client, stub) -> None:
    stub.reply = lambda _r: chat("I think the tags are ops and db.")
    await client.post("/v1/robots/a/memories", json={"key": "k", "content": "Pager duty."})
    for attempt in range(1, 6):
        await due_now(client)
        assert await run(client) == 0
        status, attempts, _ = await state(client, "k")
        assert (status, attempts) == ("pending" if attempt < 5 else "failed", attempt)
    await due_now(client)
    assert await run(client) == 0
    assert len(stub.requests) == 5
    assert "not JSON" in (await state(client, "k"))[2]


async def test_without_an_llm_nothing_is_queued_or_called(app_factory, ns, stub) -> None:
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        assert (c.app.state.components.llm, c.app.state.components.enrichment_worker) == (
            None,
            None,
        )
        await c.post("/v1/robots/a/memories", json={"key": "k", "content": LONG})
        assert await state(c, "k") == (None, 0, None)
    assert stub.requests == []
