from __future__ import annotations

import pytest

from app.embeddings import EmbeddingError, OpenAIEmbedder
from tests.stubs import Recorded, StubServer


def openai_reply(vectors: list[list[float]], order: list[int] | None = None):
    """An OpenAI-shaped answer listing `vectors` in `order` (default: input order)."""

    def reply(_req: Recorded) -> tuple[int, object]:
        indexes = order if order is not None else list(range(len(vectors)))
        data = [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in indexes]
        return 200, {"object": "list", "data": data, "model": "m", "usage": {}}

    return reply


async def test_openai_posts_model_and_texts_with_bearer_key(stub: StubServer):
    stub.reply = openai_reply([[1, 0], [0, 1]])
    embedder = OpenAIEmbedder(
        "text-embedding-3-small", 2, base_url=stub.url, api_key="sk-test", timeout_s=5
    )

    await embedder.embed(["alpha", "beta"])

    [request] = stub.requests
    assert (request.method, request.path) == ("POST", "/v1/embeddings")
    assert request.body == {"model": "text-embedding-3-small", "input": ["alpha", "beta"]}
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    await embedder.aclose()


async def test_openai_without_api_key_sends_no_authorization(stub: StubServer):
    stub.reply = openai_reply([[1, 0]])
    embedder = OpenAIEmbedder("m", 2, base_url=stub.url, timeout_s=5)

    await embedder.embed(["alpha"])

    assert "authorization" not in stub.requests[0].headers
    await embedder.aclose()


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_openai_base_url_may_include_v1(stub: StubServer, suffix: str):
    stub.reply = openai_reply([[1, 0]])
    embedder = OpenAIEmbedder("m", 2, base_url=stub.url + suffix, timeout_s=5)

    await embedder.embed(["alpha"])

    assert stub.requests[0].path == "/v1/embeddings"
    await embedder.aclose()


async def test_openai_results_are_reordered_by_index_and_normalised(stub: StubServer):
    stub.reply = openai_reply([[2, 0, 0], [0, 0, 5], [0, 3, 4]], order=[2, 0, 1])
    embedder = OpenAIEmbedder("m", 3, base_url=stub.url, timeout_s=5)

    vectors = await embedder.embed(["first", "second", "third"])

    assert vectors == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.6, 0.8]]
    await embedder.aclose()


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [0, 1]}],
        [{"index": 0, "embedding": [1, 0]}, {"index": 2, "embedding": [0, 1]}],
        [{"index": 0, "embedding": [1, 0]}],
        [{"index": "0", "embedding": [1, 0]}, {"index": 1, "embedding": [0, 1]}],
        [{"embedding": [1, 0]}, {"embedding": [0, 1]}],
    ],
    ids=["duplicate", "gap", "missing", "string-index", "no-index"],
)
async def test_openai_indexes_must_cover_every_text_once(stub: StubServer, data: list):
    stub.reply = lambda _req: (200, {"data": data})
    embedder = OpenAIEmbedder("m", 2, base_url=stub.url, timeout_s=5)

    with pytest.raises(EmbeddingError, match="index"):
        await embedder.embed(["a", "b"])
    await embedder.aclose()


async def test_openai_default_base_url_is_api_openai_com():
    embedder = OpenAIEmbedder("m", 3)

    assert embedder.url == "https://api.openai.com/v1/embeddings"
    await embedder.aclose()
