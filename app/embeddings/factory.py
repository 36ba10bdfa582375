"""Building the configured embedder at start-up, and describing it for /readyz."""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.embeddings.base import Embedder
from app.embeddings.batcher import MicroBatcher
from app.embeddings.local import LocalEmbedder
from app.embeddings.ollama import DEFAULT_OLLAMA_URL, OllamaEmbedder
from app.embeddings.openai import DEFAULT_OPENAI_URL, OpenAIEmbedder


async def build_embedder(settings: Settings) -> Embedder | None:
    """The configured provider behind a MicroBatcher, or None when clients supply vectors.

    The local model is loaded (and its dimension checked) here, raising EmbeddingError on
    failure. HTTP providers are not probed: a server that is down at start only leaves new
    memories pending until it is back.
    """
    provider = settings.embedding_provider
    model, dimension = settings.embedding_model, settings.embedding_dimension
    inner: Embedder
    if provider == "none":
        return None
    if provider == "local":
        inner = await LocalEmbedder.create(
            model, dimension, models_dir=settings.data_dir / "models"
        )
    elif provider == "ollama":
        inner = OllamaEmbedder(
            model,
            dimension,
            base_url=settings.embedding_url or DEFAULT_OLLAMA_URL,
            timeout_s=settings.embedding_timeout_s,
        )
    elif provider == "openai":
        key = settings.embedding_api_key
        inner = OpenAIEmbedder(
            model,
            dimension,
            base_url=settings.embedding_url or DEFAULT_OPENAI_URL,
            api_key=key.get_secret_value() if key else None,
            timeout_s=settings.embedding_timeout_s,
        )
    else:
        raise ValueError(f"unknown embedding provider {provider!r}")
    return MicroBatcher(
        inner, max_batch=settings.embedding_batch_size, max_wait_ms=settings.embedding_batch_wait_ms
    )


def describe(embedder: Embedder | None) -> dict[str, Any]:
    """{provider, model, dimension} of the embedder, or {provider: "none"} without one."""
    if embedder is None:
        return {"provider": "none"}
    return {"provider": embedder.provider, "model": embedder.model, "dimension": embedder.dimension}
