from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.embeddings import (
    MicroBatcher,
    OllamaEmbedder,
    OpenAIEmbedder,
    build_embedder,
    describe,
)
from app.embeddings.factory import default_threads
from app.embeddings.onnx_model import OnnxEmbedder
from tests.stubs import Recorded, StubServer


def settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


async def test_provider_none_builds_nothing_and_describes_as_none():
    embedder = await build_embedder(settings(embedding_provider="none"))

    assert embedder is None
    assert describe(embedder) == {"provider": "none"}


async def test_ollama_provider_is_batched_and_uses_the_configured_server(stub: StubServer):
    stub.reply = lambda req: (200, {"embeddings": [[1.0, 0.0]] * len(req.body["input"])})
    embedder = await build_embedder(
        settings(
            embedding_provider="ollama",
            embedding_model="nomic-embed-text",
            embedding_dimension=2,
            embedding_url=stub.url,
            embedding_batch_size=8,
        )
    )

    assert isinstance(embedder, MicroBatcher)
    assert isinstance(embedder.embedder, OllamaEmbedder)
    assert embedder.max_batch == 8
    assert describe(embedder) == {"provider": "ollama", "model": "nomic-embed-text", "dimension": 2}
    assert await embedder.embed(["a", "b"]) == [[1.0, 0.0], [1.0, 0.0]]
    assert [(r.path, r.body) for r in stub.requests] == [
        ("/api/embed", {"model": "nomic-embed-text", "input": ["a", "b"]})
    ]
    await embedder.aclose()


async def test_openai_provider_sends_the_configured_api_key(stub: StubServer):
    def reply(req: Recorded) -> tuple[int, object]:
        return 200, {"data": [{"index": 0, "embedding": [0.0, 2.0, 0.0]}]}

    stub.reply = reply
    embedder = await build_embedder(
        settings(
            embedding_provider="openai",
            embedding_model="text-embedding-3-small",
            embedding_dimension=3,
            embedding_url=stub.url + "/v1",
            embedding_api_key=SecretStr("sk-from-settings"),
            embedding_timeout_s=3,
        )
    )

    assert isinstance(embedder, MicroBatcher)
    assert isinstance(embedder.embedder, OpenAIEmbedder)
    assert embedder.embedder.timeout_s == 3
    assert await embedder.embed(["a"]) == [[0.0, 1.0, 0.0]]
    assert stub.requests[0].headers["authorization"] == "Bearer sk-from-settings"
    await embedder.aclose()


async def test_http_providers_default_to_their_usual_servers():
    ollama = await build_embedder(settings(embedding_provider="ollama"))
    openai = await build_embedder(settings(embedding_provider="openai"))

    assert isinstance(ollama, MicroBatcher) and isinstance(ollama.embedder, OllamaEmbedder)
    assert isinstance(openai, MicroBatcher) and isinstance(openai.embedder, OpenAIEmbedder)
    assert ollama.embedder.url == "http://127.0.0.1:11434/api/embed"
    assert openai.embedder.url == "https://api.openai.com/v1/embeddings"
    await ollama.aclose()
    await openai.aclose()


@pytest.mark.slow
async def test_local_provider_builds_the_bundled_model_behind_a_batcher():
    embedder = await build_embedder(settings(embedding_provider="local"))

    assert isinstance(embedder, MicroBatcher)
    assert isinstance(embedder.embedder, OnnxEmbedder)
    assert describe(embedder) == {
        "provider": "local",
        "model": "all-MiniLM-L6-v2@int8v2",
        "dimension": 384,
        "runtime": "onnx-int8",
        "threads": default_threads(),
    }
    assert len((await embedder.embed(["hello"]))[0]) == 384
    await embedder.aclose()
