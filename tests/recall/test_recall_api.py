"""Recall over HTTP: real embeddings (the local model), strategies, and embedder outages."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.stubs import Recorded, StubServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
async def local_client(app_factory) -> AsyncIterator[httpx.AsyncClient]:
    """One app with the real local model for the module (loading it takes seconds)."""
    async with app_factory(embedding_provider="local") as client:
        yield client


@pytest.fixture
def ns_client(local_client: httpx.AsyncClient) -> httpx.AsyncClient:
    local_client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
    return local_client


async def add_all(client: httpx.AsyncClient, robot: str, items: dict[str, str]) -> None:
    r = await client.post(
        f"/v1/robots/{robot}/memories/batch",
        json={"memories": [{"key": k, "content": c} for k, c in items.items()]},
    )
    assert r.status_code == 201, r.text
    assert {m["embedding_status"] for m in r.json()["memories"]} == {"ready"}


async def recall_keys(
    client, robot: str, query: str, strategy: str, limit: int = 5, **kw
) -> list[str]:
    r = await client.post(
        f"/v1/robots/{robot}/recall",
        json={"query": query, "strategy": strategy, "limit": limit, **kw},
    )
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


UNRELATED = {
    "bread": "A recipe for banana bread with walnuts and cinnamon.",
    "cat": "The cat sleeps on the windowsill every afternoon.",
    "hike": "We hiked to the summit and watched the sunset over the valley.",
    "guitar": "Practice the guitar chord progression slowly before speeding up.",
    "garden": "Tomatoes need full sun and regular watering in summer.",
}


@pytest.mark.slow
async def test_vector_recall_ranks_semantic_matches_above_unrelated(ns_client) -> None:
    await add_all(
        ns_client,
        "a",
        {
            **UNRELATED,
            "pg-index": "PostgreSQL index tuning",
            "explain": "query performance with EXPLAIN ANALYZE",
        },
    )
    keys = await recall_keys(
        ns_client, "a", "database optimization", "vector", limit=7, min_score=0
    )
    assert set(keys[:2]) == {"pg-index", "explain"}
    assert len(keys) == 7
    # The default floor (HTM_RECALL_MIN_SCORE) leaves out exactly the hits below it.
    r = await ns_client.post(
        "/v1/robots/a/recall",
        json={"query": "database optimization", "strategy": "vector", "limit": 7, "min_score": 0},
    )
    everything = {h["key"]: h["relevance"] for h in r.json()["hits"]}
    floor = ns_client.app.state.components.settings.recall_min_score  # type: ignore[attr-defined]
    kept = await recall_keys(ns_client, "a", "database optimization", "vector", limit=7)
    assert kept == [k for k, rel in everything.items() if rel >= floor]
    assert 2 <= len(kept) < 7


@pytest.mark.slow
async def test_fulltext_finds_an_exact_proper_noun_that_vector_search_misses(ns_client) -> None:
    # Surname-like memories sit closer to the bare name in embedding space than the one
    # memory that actually mentions it; only full text matches the exact word.
    await add_all(
        ns_client,
        "a",
        {
            **UNRELATED,
            "kowalczyk": "Renew the parking permit before Friday; Kowalczyk signs the form.",
            "names-pl": "Polish family names often end in -ski or -ska.",
            "names-ee": "Common Eastern European surnames include Nowak and Wisniewski.",
        },
    )
    assert await recall_keys(ns_client, "a", "Kowalczyk", "fulltext", limit=1) == ["kowalczyk"]
    assert await recall_keys(ns_client, "a", "Kowalczyk", "vector", limit=1) == ["names-ee"]


# A small labeled set: facts and questions asked the way agents ask them.
FACTS = {
    "caroline-group": "Caroline went to the LGBTQ support group on 7 May 2023.",
    "melanie-paint": "Melanie painted a sunrise over the lake last year.",
    "caroline-adopt": "Caroline is researching adoption agencies.",
    "jon-bakery": "Jon lost his job as a banker and opened a bakery.",
    "gina-dance": "Gina started a dance studio after losing her job.",
    "db-version": "The staging database runs PostgreSQL 16 with pgvector 0.8.",
    "deploy-friday": "We never deploy to production on Fridays.",
    "oncall": "Priya is on call for the payments service this week.",
    "api-limit": "The public API allows 100 requests per minute per key.",
    "cache-ttl": "Session cache entries expire after 30 minutes.",
    "coffee": "The office coffee machine is descaled every Monday.",
    "offsite": "The team offsite will be held in Lisbon in October.",
}
QUESTIONS = {
    "When did Caroline go to the support group?": "caroline-group",
    "What did Melanie paint?": "melanie-paint",
    "What is Caroline researching?": "caroline-adopt",
    "What business did Jon open after losing his job?": "jon-bakery",
    "Which Postgres version does staging use?": "db-version",
    "Can we ship to prod at the end of the week?": "deploy-friday",
    "Who is on call for payments?": "oncall",
    "What is the rate limit of the public API?": "api-limit",
    "How long do sessions stay cached?": "cache-ttl",
    "Where is the offsite this year?": "offsite",
}


@pytest.mark.slow
async def test_hybrid_recall_at_5_is_at_least_each_strategy_alone(ns_client) -> None:
    await add_all(ns_client, "a", {**FACTS, **UNRELATED})
    recall_at_5 = {}
    for strategy in ("vector", "fulltext", "hybrid"):
        found = 0
        for question, answer in QUESTIONS.items():
            found += answer in await recall_keys(ns_client, "a", question, strategy, limit=5)
        recall_at_5[strategy] = found / len(QUESTIONS)
    assert recall_at_5["hybrid"] >= recall_at_5["vector"], recall_at_5
    assert recall_at_5["hybrid"] >= recall_at_5["fulltext"], recall_at_5
    assert recall_at_5["hybrid"] == 1.0, recall_at_5


@pytest.mark.slow
async def test_recall_reports_ranks_scores_and_loads_working_memory(ns_client) -> None:
    await add_all(ns_client, "writer", FACTS)
    r = await ns_client.post(
        "/v1/robots/reader/recall",
        json={"query": "When did Caroline go to the support group?", "limit": 2},
    )
    body = r.json()
    assert body["strategy"] == "hybrid" and body["embedding"] == "ready"
    # the deployment's default fusion (chosen by make eval), reported with the answer
    assert body["fusion"] == {
        "method": "score",
        "k": None,
        "vector_weight": 0.6,
        "fulltext_weight": 0.4,
        "normalization": "zscore",
        "candidates": 64,  # k + 2·limit
        "turn_spread": 0.0,
    }
    top = body["hits"][0]
    assert top["key"] == "caroline-group" and top["author"] == "writer"
    assert top["vector_rank"] == 1 and top["fulltext_rank"] == 1
    r = await ns_client.post(
        "/v1/robots/reader/recall",
        json={
            "query": "When did Caroline go to the support group?",
            "limit": 2,
            "fusion": {"method": "rrf", "k": 60, "vector_weight": 1, "fulltext_weight": 1},
        },
    )
    assert r.json()["hits"][0]["score"] == pytest.approx(2 / 61)
    assert body["working_memory"]["loaded"] == [h["key"] for h in body["hits"]]
    wm = (await ns_client.get("/v1/robots/reader/working-memory")).json()
    assert {i["key"] for i in wm["items"]} == {h["key"] for h in body["hits"]}


def _one_hot(i: int) -> list[float]:
    v = [0.0] * 384
    v[i] = 1.0
    return v


async def test_embedder_outage_gives_201_pending_then_the_worker_embeds(
    app_factory, database_factory, stub: StubServer
) -> None:
    # A database of its own: the embedding worker serves every namespace, so on the shared
    # database another app's worker (this module's local-model app) could embed the pending
    # memory first, with its own model.
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    stub.reply = lambda _req: (503, {"error": "overloaded"})
    async with app_factory(
        background=True,  # the embedding worker's passes are what this test waits for
        database_url=url,
        embedding_provider="openai",
        embedding_model="stub-embed",
        embedding_url=stub.url,
        embedding_timeout_s=2,
        embedding_worker_interval_s=0.05,
    ) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        r = await client.post(
            "/v1/robots/a/memories", json={"key": "k", "content": "the launch code is tulip"}
        )
        assert r.status_code == 201
        assert r.json()["embedding_status"] == "pending"

        async def vector_hits() -> list[str]:
            r = await client.post(
                "/v1/robots/a/recall",
                json={"query": "launch code", "strategy": "vector", "embedding": _one_hot(7)},
            )
            assert r.status_code == 200, r.text
            return [h["key"] for h in r.json()["hits"]]

        assert await vector_hits() == []
        assert await recall_keys(client, "a", "launch code", "fulltext") == ["k"]
        # Hybrid still answers while the embedder is down, on full text alone.
        r = await client.post("/v1/robots/a/recall", json={"query": "launch code"})
        assert (r.json()["embedding"], [h["key"] for h in r.json()["hits"]]) == (
            "unavailable",
            ["k"],
        )
        r = await client.post("/v1/robots/a/recall", json={"query": "x", "strategy": "vector"})
        assert r.status_code == 503

        def healthy(req: Recorded) -> tuple[int, dict]:
            data = [{"index": i, "embedding": _one_hot(7)} for i in range(len(req.body["input"]))]
            return 200, {"data": data}

        stub.reply = healthy
        for _ in range(200):
            got = (await client.get("/v1/robots/a/memories/k")).json()
            if got["embedding_status"] == "ready":
                break
            await asyncio.sleep(0.05)
        assert (got["embedding_status"], got["embedding_model"]) == ("ready", "stub-embed")
        assert await vector_hits() == ["k"]


async def test_recall_limits_are_4xx_problem_json(app_factory) -> None:
    async with app_factory(max_query_chars=50, max_recall_limit=10) as client:
        cases = [
            ({"query": "x" * 51}, 413),
            ({"query": "x", "limit": 11}, 422),
            ({"query": "x", "limit": 0}, 422),
            ({"query": ""}, 422),
            ({"query": "x", "strategy": "magic"}, 422),
            ({"query": "x", "timeframe": "next full moon"}, 422),
            ({"query": "x", "embedding": [0.1, 0.2]}, 422),
            ({"query": "x", "unknown": True}, 422),
        ]
        for body, status in cases:
            r = await client.post("/v1/robots/a/recall", json=body)
            assert (r.status_code, r.headers["content-type"]) == (
                status,
                "application/problem+json",
            ), body
