"""Failures every HTTP provider turns into EmbeddingError (callers then store memories pending)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from app.embeddings import EmbeddingError, OllamaEmbedder, OpenAIEmbedder
from app.embeddings._http import HttpEmbedder
from tests.stubs import StubServer


@dataclass
class Provider:
    make: Callable[[str, float], HttpEmbedder]
    answer: Callable[[list[list[float]]], Any]


PROVIDERS = {
    "ollama": Provider(
        lambda url, t: OllamaEmbedder("m", 3, base_url=url, timeout_s=t),
        lambda vectors: {"embeddings": vectors},
    ),
    "openai": Provider(
        lambda url, t: OpenAIEmbedder("m", 3, base_url=url, api_key="k", timeout_s=t),
        lambda vectors: {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]},
    ),
}


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> Provider:
    return PROVIDERS[request.param]


async def test_http_500_is_an_embedding_error(stub: StubServer, provider: Provider):
    stub.reply = lambda _req: (500, "upstream exploded")
    embedder = provider.make(stub.url, 5)

    with pytest.raises(EmbeddingError, match="returned HTTP 500: upstream exploded"):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_slow_server_is_an_embedding_error_after_the_timeout(
    stub: StubServer, provider: Provider
):
    stub.reply = lambda _req: (200, provider.answer([[1, 0, 0]]))
    stub.delay_s = 1.5
    embedder = provider.make(stub.url, 0.2)

    with pytest.raises(EmbeddingError, match=r"timed out after 0\.2s"):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_wrong_dimension_is_an_embedding_error(stub: StubServer, provider: Provider):
    stub.reply = lambda _req: (200, provider.answer([[1, 0, 0], [1, 0, 0, 0]]))
    embedder = provider.make(stub.url, 5)

    with pytest.raises(EmbeddingError, match="4-dimensional vector, but embedding_dimension is 3"):
        await embedder.embed(["a", "b"])
    await embedder.aclose()


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        ([[1, 0, 0]], "for 2 texts"),
        ([[1, 0, 0], [0, 0, 0]], "all-zero vector"),
        ([[1, 0, 0], ["x", 0, 0]], "not numeric"),
        ([[1, 0, 0], "abc"], "vector 1 as str"),
    ],
    ids=["too-few", "zero", "non-numeric", "not-a-list"],
)
async def test_malformed_vectors_are_an_embedding_error(
    stub: StubServer, provider: Provider, vectors: list, message: str
):
    stub.reply = lambda _req: (200, provider.answer(vectors))
    embedder = provider.make(stub.url, 5)

    with pytest.raises(EmbeddingError, match=message):
        await embedder.embed(["a", "b"])
    await embedder.aclose()


async def test_non_json_body_is_an_embedding_error(stub: StubServer, provider: Provider):
    stub.reply = lambda _req: (200, "<html>captive portal</html>")
    embedder = provider.make(stub.url, 5)

    with pytest.raises(EmbeddingError, match="not JSON"):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_unreachable_server_is_an_embedding_error(closed_port_url: str, provider: Provider):
    embedder = provider.make(closed_port_url, 5)

    with pytest.raises(EmbeddingError, match="failed: ConnectError"):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_empty_input_sends_no_request(stub: StubServer, provider: Provider):
    embedder = provider.make(stub.url, 5)

    assert await embedder.embed([]) == []
    assert stub.requests == []
    await embedder.aclose()
