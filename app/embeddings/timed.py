"""The app's embedder as the services use it: possibly absent (none configured, or it failed
to load), and never waited on longer than the deployment's timeout."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.embeddings.base import Embedder, EmbeddingError
from app.embeddings.factory import describe
from app.embeddings.query_cache import QueryEmbeddingCache
from app.tracing import dependency

log = logging.getLogger(__name__)


class TimedEmbedder:
    def __init__(
        self,
        embedder: Embedder | None,
        timeout_s: float,
        *,
        provider: str = "none",
        load_error: str | None = None,
        query_cache: QueryEmbeddingCache | None = None,
    ) -> None:
        self.embedder = embedder
        self.query_cache = query_cache if query_cache is not None else QueryEmbeddingCache(0)
        self.timeout_s = timeout_s
        self.provider = provider  # the configured one, for /readyz when it did not load
        self.load_error = load_error
        self.failures = 0  # provider calls that failed or timed out, for /metrics

    @property
    def available(self) -> bool:
        return self.embedder is not None

    @property
    def model(self) -> str | None:
        return self.embedder.model if self.embedder is not None else None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """The vectors; EmbeddingError when the provider fails, or (transient) times out."""
        if self.embedder is None:
            raise EmbeddingError("no embedder is loaded", transient=True)
        try:
            with dependency("embedder", texts=len(texts)):
                return await asyncio.wait_for(self.embedder.embed(texts), self.timeout_s)
        except EmbeddingError:
            self.failures += 1
            raise
        except TimeoutError:
            self.failures += 1
            raise EmbeddingError(
                f"embedding timed out after {self.timeout_s:g}s", transient=True
            ) from None

    async def embed_or_defer(
        self, texts: list[str], what: str = "embedding deferred to the worker"
    ) -> tuple[list[list[float] | None], str | None]:
        """(vectors, model) now if the provider answers in time; otherwise (all None, None)
        and the caller stores the texts as pending (or searches without a vector)."""
        if self.embedder is None or not texts:
            return [None] * len(texts), None
        try:
            vectors = await self.embed(texts)
        except EmbeddingError as exc:
            log.warning("%s: %s", what, exc)
            return [None] * len(texts), None
        return list(vectors), self.embedder.model

    async def embed_query(self, text: str) -> list[float] | None:
        """A question's vector: from the query cache, else the provider (None when it fails
        or times out: the caller searches without a vector)."""
        cached = self.query_cache.get(self.model, text)
        if cached is not None:
            return cached
        [vector], model = await self.embed_or_defer([text], "query embedding failed")
        if vector is not None and model is not None:
            self.query_cache.put(model, text, vector)
        return vector

    def describe(self) -> dict[str, Any]:
        if self.embedder is None:
            return {"provider": self.provider, "loaded": False}
        return describe(self.embedder) | {"loaded": True}

    async def aclose(self) -> None:
        if self.embedder is not None:
            await self.embedder.aclose()
