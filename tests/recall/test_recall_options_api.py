"""Recall's options over HTTP: fusion and signals per request, explain's numbers, timeframe
auto, the query embedding cache, the reranker (a real local HTTP server) and the embedding
dimension check at start."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.stubs import Recorded, StubServer
from tests.vectors import similarity

DIM = 384


def toward(similarity: float, axis: int) -> list[float]:
    """A unit vector whose cosine similarity to e0 is `similarity`."""
    v = [0.0] * DIM
    v[0] = similarity
    v[axis] = (1 - similarity**2) ** 0.5
    return v


E0 = toward(1.0, 1)


def as_stored_similarity(s: float) -> float:
    """The similarity of toward(s, i) to E0 as the database computes it (tests/vectors.py)."""
    return similarity(toward(s, 2), E0)


# key: (content, similarity to e0, created_at)
ITEMS = {
    "a": ("Sunset over the lake", 0.9, "2026-01-01T01:00:00Z"),
    "x": ("Caroline found a support group", 0.8, "2026-01-01T02:00:00Z"),
    "b": ("A parade downtown", 0.7, "2026-01-01T03:00:00Z"),
    "y": ("The support group met", 0.5, "2026-01-01T05:00:00Z"),
}
QUESTION = "Caroline support group parade"

# These tests pin orders by equal-weight RRF (k = 60) over the lists above: x y b a.
# The deployment default (score fusion) is pinned in test_recall_api.py.
RRF = {
    "recall_fusion": "rrf",
    "recall_vector_weight": 1.0,
    "recall_fulltext_weight": 1.0,
    "recall_normalization": "minmax",
}


@pytest.fixture
async def client(app_factory, ns: str):  # type: ignore[no-untyped-def]
    async with app_factory(**RRF) as c:
        c.headers["X-Namespace"] = ns
        yield c


async def seed(client: httpx.AsyncClient, robot: str = "r") -> None:
    body = {
        "memories": [
            {"key": k, "content": c, "embedding": toward(s, i + 2), "created_at": t}
            for i, (k, (c, s, t)) in enumerate(ITEMS.items())
        ]
    }
    r = await client.post(f"/v1/robots/{robot}/memories/batch", json=body)
    assert r.status_code == 201, r.text


async def recall(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    body = {"query": QUESTION, "embedding": E0, "load_into_working_memory": False, **body}
    r = await client.post("/v1/robots/r/recall", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_explain_reports_each_lists_rank_score_and_share(client) -> None:
    await seed(client)
    fusion = {"method": "rrf", "k": 10, "vector_weight": 1, "fulltext_weight": 2}
    body = await recall(client, limit=10, explain=True, fusion=fusion)

    assert body["fusion"] == {
        "method": "rrf",
        "k": 10,
        "vector_weight": 1.0,
        "fulltext_weight": 2.0,
        "normalization": None,
        "candidates": 30,  # k + 2·limit (limit 10)
        "turn_spread": 0.0,
    }
    hits = {h["key"]: h for h in body["hits"]}
    x = hits["x"]["explain"]
    # x: vector rank 2, text rank 1 (3 of its words); a: vector 1 only
    assert (x["vector"]["rank"], x["fulltext"]["rank"]) == (2, 1)
    assert x["vector"]["score"] == pytest.approx(as_stored_similarity(0.8), abs=1e-6)
    assert x["fulltext"]["score"] == hits["x"]["fulltext_score"]
    assert x["vector"]["share"] == pytest.approx(1 / 12, rel=1e-12)
    assert x["fulltext"]["share"] == pytest.approx(2 / 11, rel=1e-12)
    assert x["fused"] == pytest.approx(1 / 12 + 2 / 11, rel=1e-12)
    assert x["score"] == hits["x"]["score"] == x["fused"]
    assert (x["signals"], x["scaled"], x["rerank"]) == ({}, None, None)
    # the explanation's relevance is the hit's: its cosine similarity, what min_score compares
    assert x["relevance"] == hits["x"]["relevance"] == x["vector"]["score"]
    # RRF ranks by the lists' ranks: a, on the vector list only, has no full-text part
    assert hits["a"]["explain"]["fulltext"] is None
    assert [h["key"] for h in body["hits"]] == ["x", "y", "b", "a"]


async def test_explain_is_absent_unless_asked(client) -> None:
    await seed(client)
    body = await recall(client)
    assert {h["explain"] is None for h in body["hits"]} == {True}
    assert body["searched"] == QUESTION


async def test_signals_per_request_reorder_and_explain_their_contributions(client) -> None:
    await seed(client)
    # recency alone (weight 1): newest first, each 0.5 per hour of age with a 1-hour half-life
    body = await recall(
        client,
        explain=True,
        now="2026-01-01T05:00:00Z",
        signals={"recency": 1.0, "half_life_days": 1 / 24},
    )
    assert [h["key"] for h in body["hits"]] == ["y", "b", "x", "a"]
    assert [h["score"] for h in body["hits"]] == pytest.approx([1.0, 0.25, 0.125, 0.0625])
    y = body["hits"][0]["explain"]
    assert y["signals"] == {"recency": {"value": 1.0, "weight": 1.0, "contribution": 1.0}}
    assert y["scaled"] == 0.0  # (1 − Σw) = 0
    assert y["relevance"] == body["hits"][0]["relevance"]


async def test_the_access_signal_reads_the_flushed_counts(client) -> None:
    """Access counts live in memory_access (migration 0025): 100 accesses make the signal 1,
    10 ln(11) / ln(101), none 0."""
    await seed(client)
    listed = (await client.get("/v1/robots/r/memories", params={"limit": 10})).json()["items"]
    ids = {m["key"]: m["id"] for m in listed}
    access = client.app.state.components.access
    access.record([ids["a"]] * 100 + [ids["b"]] * 10, datetime(2026, 1, 2, tzinfo=UTC))
    assert await access.flush() == 110
    body = await recall(client, explain=True, signals={"access": 1.0})
    assert [h["key"] for h in body["hits"][:2]] == ["a", "b"]
    values = {h["key"]: h["explain"]["signals"]["access"]["value"] for h in body["hits"]}
    assert values == pytest.approx({"a": 1.0, "b": math.log(11) / math.log(101), "x": 0, "y": 0})


async def test_recency_of_a_memory_thousands_of_half_lives_old_is_zero_not_a_500(client) -> None:
    old = {
        "key": "ancient",
        "content": QUESTION,
        "embedding": E0,
        "created_at": "1900-01-01T00:00:00Z",
    }
    assert (await client.post("/v1/robots/r/memories", json=old)).status_code == 201
    # 126 years at a 1-hour half-life: 0.5 ** 1.1 million underflows float8.
    body = await recall(client, explain=True, signals={"recency": 0.5, "half_life_days": 1 / 24})
    [hit] = body["hits"]
    assert hit["key"] == "ancient"
    assert hit["explain"]["signals"]["recency"]["value"] == pytest.approx(0.0, abs=1e-300)


async def test_score_fusion_per_request(client) -> None:
    await seed(client)
    fusion = {"method": "score", "vector_weight": 1, "fulltext_weight": 0}
    body = await recall(client, fusion=fusion)
    # vector alone, min-max over a .9 … y .5: a 1, x .75, b .5, y 0 (as stored: halfvec's
    # rounding moves the similarities by < 1e-3)
    assert [h["key"] for h in body["hits"]] == ["a", "x", "b", "y"]
    sims = [as_stored_similarity(ITEMS[k][1]) for k in "axby"]
    expected = [(s - sims[-1]) / (sims[0] - sims[-1]) for s in sims]
    assert [h["score"] for h in body["hits"]] == pytest.approx(expected, abs=1e-6)
    assert body["fusion"]["normalization"] == "minmax"


async def test_timeframe_auto_takes_the_phrase_out_and_applies_it(client) -> None:
    await seed(client)
    body = await recall(
        client,
        query="What about the support group yesterday?",
        timeframe="auto",
        now="2026-01-02T12:00:00Z",
    )
    assert body["searched"] == "What about the support group?"
    assert body["timeframe"] == {
        "start": "2026-01-01T00:00:00Z",
        "end": "2026-01-02T00:00:00Z",
        "phrase": "yesterday",
    }
    assert [h["key"] for h in body["hits"]][:2] == ["x", "y"]

    body = await recall(
        client, query="What about the support group last week?", timeframe="auto",
        now="2026-01-02T12:00:00Z",
    )  # fmt: skip
    assert (body["hits"], body["timeframe"]["phrase"]) == ([], "last week")

    body = await recall(client, query="What about the support group?", timeframe="auto")
    assert (body["timeframe"], body["searched"]) == (None, "What about the support group?")
    assert len(body["hits"]) == 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"strategy": "vector", "fusion": {"k": 5}}, "fusion"),
        ({"strategy": "fulltext", "signals": {"recency": 0.5}}, "signals"),
        ({"fusion": {"vector_weight": 0, "fulltext_weight": 0}}, "fusion.vector_weight"),
        ({"signals": {"recency": 0.6, "importance": 0.5}}, "signals"),
        ({"rerank": True}, "rerank"),
        ({"fusion": {"method": "borda"}}, "fusion.method"),
        ({"fusion": {"k": 0}}, "fusion.k"),
        ({"fusion": {"candidates": 1001}}, "fusion.candidates"),
        ({"signals": {"half_life_days": 0}}, "signals.half_life_days"),
        ({"signals": {"tags": ["Not A Tag!"]}}, "signals.tags.0"),
        ({"explain": "yes"}, "explain"),
    ],
)
async def test_bad_options_are_422_and_register_nothing(client, body, field) -> None:
    robot = f"r-{uuid.uuid4().hex[:6]}"
    r = await client.post(f"/v1/robots/{robot}/recall", json={"query": "x", **body})
    assert (r.status_code, r.headers["content-type"]) == (422, "application/problem+json")
    # schema errors name the body's path; the service's own checks the request field
    assert field in {e["field"].removeprefix("body.") for e in r.json()["errors"]}, r.json()
    assert (await client.get(f"/v1/robots/{robot}")).status_code == 404


# --- the query embedding cache --------------------------------------------------------------


def embeddings_reply(req: Recorded) -> tuple[int, Any]:
    return 200, {"data": [{"index": i, "embedding": E0} for i in range(len(req.body["input"]))]}


async def test_a_repeated_question_is_embedded_once_and_the_hit_ratio_is_in_stats(
    app_factory, stub: StubServer, ns: str
) -> None:
    stub.reply = embeddings_reply
    async with app_factory(
        embedding_provider="openai", embedding_model="stub-embed", embedding_url=stub.url
    ) as client:
        client.headers["X-Namespace"] = ns
        for query in ["where is the parade", "where is the parade", "who went", "who went"]:
            r = await client.post(
                "/v1/robots/r/recall", json={"query": query, "load_into_working_memory": False}
            )
            assert (r.status_code, r.json()["embedding"]) == (200, "ready")
        assert [req.body["input"] for req in stub.requests] == [
            ["where is the parade"],
            ["who went"],
        ]
        cache = (await client.get("/v1/stats")).json()["query_embedding_cache"]
        assert cache == {
            "entries": 2,
            "max_entries": 10_000,
            "hits": 2,
            "misses": 2,
            "hit_ratio": 0.5,
        }


# --- the reranker ---------------------------------------------------------------------------


def tei_reply(scores: dict[str, float]):  # type: ignore[no-untyped-def]
    """text-embeddings-inference's answer: sorted by score, each with its index."""

    def reply(req: Recorded) -> tuple[int, Any]:
        found = [{"index": i, "score": scores[t]} for i, t in enumerate(req.body["texts"])]
        return 200, sorted(found, key=lambda f: -f["score"])

    return reply


CONTENT_SCORES = {c: s for c, s in [(ITEMS[k][0], v) for k, v in
                  {"a": 0.1, "x": 0.2, "b": 0.9, "y": 0.5}.items()]}  # fmt: skip


async def test_the_reranker_reorders_the_fused_candidates(
    app_factory, stub: StubServer, ns: str
) -> None:
    stub.reply = tei_reply(CONTENT_SCORES)
    async with app_factory(
        rerank_url=stub.url + "/rerank", rerank_api="tei", rerank_candidates=4, **RRF
    ) as client:
        client.headers["X-Namespace"] = ns
        await seed(client)
        body = await recall(client, limit=3, explain=True)

        [req] = stub.requests
        assert req.path == "/rerank"
        # the fused order (x y b a) goes out, four deep; the reranker's best three come back
        assert req.body == {"query": QUESTION, "texts": [ITEMS[k][0] for k in "xyba"]}
        assert body["reranked"] is True
        assert [h["key"] for h in body["hits"]] == ["b", "y", "x"]
        assert [h["score"] for h in body["hits"]] == [0.9, 0.5, 0.2]
        assert [h["explain"]["rerank"] for h in body["hits"]] == [
            {"score": 0.9, "rank": 1, "fused_rank": 3},
            {"score": 0.5, "rank": 2, "fused_rank": 2},
            {"score": 0.2, "rank": 3, "fused_rank": 1},
        ]

        # rerank: false skips it
        body = await recall(client, limit=3, rerank=False)
        assert (body["reranked"], [h["key"] for h in body["hits"]]) == (False, ["x", "y", "b"])
        assert len(stub.requests) == 1


async def test_a_failing_reranker_leaves_the_fused_order(
    app_factory, stub: StubServer, ns: str
) -> None:
    stub.reply = lambda _req: (503, {"error": "loading"})
    async with app_factory(rerank_url=stub.url + "/v1/rerank", rerank_model="bge", **RRF) as client:
        client.headers["X-Namespace"] = ns
        await seed(client)
        body = await recall(client, limit=3)
        assert (body["reranked"], [h["key"] for h in body["hits"]]) == (False, ["x", "y", "b"])
        assert stub.requests[0].body == {
            "query": QUESTION,
            "documents": [ITEMS[k][0] for k in "xyba"],
            "top_n": 4,
            "model": "bge",
        }


async def test_the_cohere_shape_is_read_by_index(app_factory, stub: StubServer, ns: str) -> None:
    def reply(req: Recorded) -> tuple[int, Any]:
        docs = req.body["documents"]
        results = [{"index": i, "relevance_score": CONTENT_SCORES[d]} for i, d in enumerate(docs)]
        return 200, {"results": results[::-1]}

    stub.reply = reply
    async with app_factory(rerank_url=stub.url + "/v1/rerank") as client:
        client.headers["X-Namespace"] = ns
        await seed(client)
        body = await recall(client, limit=2)
        assert [h["key"] for h in body["hits"]] == ["b", "y"]


# --- the embedding dimension, checked at start ---------------------------------------------


async def test_a_dimension_other_than_the_databases_refuses_to_start(app_factory) -> None:
    from app.embeddings.base import DimensionMismatch

    with pytest.raises(DimensionMismatch, match="database stores 384-dimensional vectors"):
        async with app_factory(embedding_dimension=768):
            pass


async def test_an_http_model_of_another_dimension_refuses_to_start(
    app_factory, stub: StubServer
) -> None:
    """The OpenAI-compatible provider's dimension is the configured one; the check reads
    the database's. (The local provider is checked against its model: test_local.py.)"""
    from app.embeddings.base import DimensionMismatch

    stub.reply = embeddings_reply
    with pytest.raises(DimensionMismatch, match="HTM_EMBEDDING_DIMENSION is 1024"):
        async with app_factory(
            embedding_provider="openai", embedding_url=stub.url, embedding_dimension=1024
        ):
            pass
