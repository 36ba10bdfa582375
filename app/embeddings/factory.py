"""Building the configured embedder at start-up, and describing it for /readyz."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from app.config import Settings
from app.embeddings.base import DimensionMismatch, Embedder, EmbeddingError
from app.embeddings.batcher import MicroBatcher
from app.embeddings.lazy import LazyEmbedder
from app.embeddings.local import LocalEmbedder
from app.embeddings.ollama import DEFAULT_OLLAMA_URL, OllamaEmbedder
from app.embeddings.onnx_model import OnnxEmbedder, available, exported
from app.embeddings.openai import DEFAULT_OPENAI_URL, OpenAIEmbedder

log = logging.getLogger(__name__)


def default_threads(cores: int | None = None) -> int:
    """The local model's thread budget when HTM_EMBEDDING_THREADS is unset: 1 on up to 2
    cores, half the cores (at most 4) above that."""
    n = cores if cores is not None else (os.cpu_count() or 1)
    return 1 if n <= 2 else min(4, n // 2)


async def build_local(settings: Settings) -> Embedder:
    """The local model on the configured runtime (HTM_EMBEDDING_RUNTIME; `auto`: ONNX Runtime
    when it is installed and the model exports, else torch) and thread budget."""
    model, dimension = settings.embedding_model, settings.embedding_dimension
    threads = settings.embedding_threads or default_threads()
    models_dir = settings.data_dir / "models"
    runtime = settings.embedding_runtime
    if runtime == "auto" and available():
        try:
            return await OnnxEmbedder.create(
                model, dimension, models_dir=models_dir, threads=threads
            )
        except EmbeddingError as exc:
            if isinstance(exc, DimensionMismatch):
                raise
            log.warning("the local model runs on torch: %s", exc)
    elif runtime in ("onnx", "onnx-int8"):
        return await OnnxEmbedder.create(
            model,
            dimension,
            models_dir=models_dir,
            threads=threads,
            quantized=runtime == "onnx-int8",
        )
    return await LocalEmbedder.create(model, dimension, models_dir=models_dir, threads=threads)


def pending_export(settings: Settings) -> tuple[str, Path, bool] | None:
    """The ONNX export the local model's runtime will load and that is not made yet, as
    `onnx_model.ensure_exported`'s (model, models_dir, quantized); None when none is due
    (another provider, torch, or a model ONNX cannot run: build_local decides as usual)."""
    runtime = settings.embedding_runtime
    if settings.embedding_provider != "local" or runtime == "torch" or not available():
        return None
    models_dir, quantized = settings.data_dir / "models", runtime == "onnx-int8"
    try:
        if exported(settings.embedding_model, models_dir, quantized=quantized):
            return None
    except EmbeddingError:
        return None
    return settings.embedding_model, models_dir, quantized


async def build_embedder(settings: Settings, *, lazy: bool = False) -> Embedder | None:
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
    if provider == "local" and lazy:  # loaded on the first embed (app/embeddings/lazy.py)
        inner = LazyEmbedder(lambda: build_local(settings), model, dimension)
    elif provider == "local":
        inner = await build_local(settings)
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
    described = {
        "provider": embedder.provider,
        "model": embedder.model,
        "dimension": embedder.dimension,
    }
    inner: Any = getattr(embedder, "embedder", embedder)
    if hasattr(inner, "runtime"):
        described |= {"runtime": inner.runtime, "threads": inner.threads}
    return described
