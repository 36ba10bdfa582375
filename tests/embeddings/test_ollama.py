from __future__ import annotations

import pytest

from app.embeddings import EmbeddingError, OllamaEmbedder
from tests.stubs import StubServer


async def test_ollama_posts_model_and_texts_to_api_embed(stub: StubServer):
    stub.reply = lambda _req: (200, {"model": "nomic-embed-text", "embeddings": [[1, 0], [0, 2]]})
    embedder = OllamaEmbedder("nomic-embed-text", 2, base_url=stub.url + "/", timeout_s=5)

    await embedder.embed(["alpha", "beta"])

    [request] = stub.requests
    assert (request.method, request.path) == ("POST", "/api/embed")
    assert request.body == {"model": "nomic-embed-text", "input": ["alpha", "beta"]}
    assert request.headers["content-type"] == "application/json"
    assert "authorization" not in request.headers
    await embedder.aclose()


async def test_ollama_vectors_are_normalised_to_unit_length(stub: StubServer):
    stub.reply = lambda _req: (200, {"embeddings": [[3, 0, 4], [0, -2, 0]]})
    embedder = OllamaEmbedder("m", 3, base_url=stub.url, timeout_s=5)

    vectors = await embedder.embed(["a", "b"])

    assert vectors == [[0.6, 0.0, 0.8], [0.0, -1.0, 0.0]]
    await embedder.aclose()


async def test_ollama_body_without_embeddings_is_an_embedding_error(stub: StubServer):
    stub.reply = lambda _req: (200, {"error": "model not loaded"})
    embedder = OllamaEmbedder("m", 3, base_url=stub.url, timeout_s=5)

    with pytest.raises(EmbeddingError, match='without "embeddings"'):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_ollama_default_base_url_is_local_ollama():
    embedder = OllamaEmbedder("m", 3)

    assert embedder.url == "http://127.0.0.1:11434/api/embed"
    await embedder.aclose()
