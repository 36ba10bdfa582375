"""Building the configured embedder at start-up, and describing it for /readyz."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import app.embeddings.packaged as packaged
from app.config import EmbeddingRuntime, Settings
from app.embeddings.base import DimensionMismatch, Embedder, EmbeddingError
from app.embeddings.batcher import MicroBatcher
from app.embeddings.lazy import LazyEmbedder
from app.embeddings.local import LocalEmbedder
from app.embeddings.ollama import DEFAULT_OLLAMA_URL, OllamaEmbedder
from app.embeddings.onnx_model import INT8_SUFFIX, OnnxEmbedder, available, exported
from app.embeddings.openai import DEFAULT_OPENAI_URL, OpenAIEmbedder

log = logging.getLogger(__name__)


def default_threads(cores: int | None = None) -> int:
    """The local model's thread budget when HTM_EMBEDDING_THREADS is unset: 1 on up to 2
    cores, half the cores (at most 4) above that."""
    n = cores if cores is not None else (os.cpu_count() or 1)
    return 1 if n <= 2 else min(4, n // 2)


def local_runtime(settings: Settings) -> EmbeddingRuntime:
    """The local model's runtime: HTM_EMBEDDING_RUNTIME, `auto` read as the int8 model on
    ONNX Runtime when that is installed, else torch. (The service first reads `auto` against
    the database, `stored_runtime`: a database embedded by the float model stays on it.)"""
    runtime = settings.embedding_runtime
    if runtime == "auto":
        return "onnx-int8" if available() else "torch"
    return runtime


def local_model_name(settings: Settings) -> str:
    """The name the local model records its vectors under (memory.embedding_model): the int8
    model's is `<model>@int8` (onnx_model.py), the float runtimes' the model's own."""
    name = packaged.canonical(settings.embedding_model) or settings.embedding_model
    return f"{name}{INT8_SUFFIX}" if local_runtime(settings) == "onnx-int8" else name


def stored_runtime(settings: Settings, newest: str | None) -> Settings:
    """`settings` with `auto` decided for a database whose newest vector the model `newest`
    made (None: no vector yet): a database embedded by the float model goes on with it (its
    vectors and the int8 model's questions would be mixed in one search), and says how to
    move it; anything else runs `auto` as `local_runtime` reads it."""
    if settings.embedding_provider != "local" or settings.embedding_runtime != "auto":
        return settings
    if newest is None or local_runtime(settings) != "onnx-int8":
        return settings
    float_name = local_model_name(settings.model_copy(update={"embedding_runtime": "onnx"}))
    if newest != float_name:
        return settings
    log.warning(
        "this database's vectors were made by the float model %s: the local model runs it "
        "(runtime onnx) rather than mix them with the int8 model's. To move to the int8 "
        "model (the default for new databases; 2-3x less CPU per text): "
        "HTM_EMBEDDING_RUNTIME=onnx-int8, then `htm reembed` each namespace; to stay and "
        "silence this: HTM_EMBEDDING_RUNTIME=onnx",
        float_name,
    )
    return settings.model_copy(update={"embedding_runtime": "onnx"})


async def build_local(settings: Settings) -> Embedder:
    """The local model on its runtime (`local_runtime`; `auto` falls back to torch when the
    model does not export to ONNX) and thread budget."""
    model, dimension = settings.embedding_model, settings.embedding_dimension
    threads = settings.embedding_threads or default_threads()
    models_dir = settings.data_dir / "models"
    runtime = local_runtime(settings)
    if runtime in ("onnx", "onnx-int8"):
        try:
            return await OnnxEmbedder.create(
                model,
                dimension,
                models_dir=models_dir,
                threads=threads,
                quantized=runtime == "onnx-int8",
            )
        except EmbeddingError as exc:
            if isinstance(exc, DimensionMismatch) or settings.embedding_runtime != "auto":
                raise
            log.warning("the local model runs on torch: %s", exc)
    return await LocalEmbedder.create(model, dimension, models_dir=models_dir, threads=threads)


def pending_export(settings: Settings) -> tuple[str, Path, bool] | None:
    """The ONNX export the local model's runtime will load and that is not made yet, as
    `onnx_model.ensure_exported`'s (model, models_dir, quantized); None when none is due
    (another provider, torch, or a model ONNX cannot run: build_local decides as usual)."""
    runtime = local_runtime(settings)
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
        inner = LazyEmbedder(lambda: build_local(settings), local_model_name(settings), dimension)
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
