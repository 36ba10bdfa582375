"""The local model loaded on its first embed, not at start: what the commands that may never
embed use (`htm mcp`, the data commands), so they answer in a second instead of after the
model's load. `htm serve` loads it at start (its /readyz then says the model is ready)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from app.embeddings.base import Embedder


class LazyEmbedder:
    provider = "local"

    def __init__(self, build: Callable[[], Awaitable[Embedder]], model: str, dimension: int):
        self._build = build
        self._model, self._dimension = model, dimension
        self._loaded: Embedder | None = None
        self._lock = asyncio.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def runtime(self) -> Any:
        return getattr(self._loaded, "runtime", "not loaded yet")

    @property
    def threads(self) -> Any:
        return getattr(self._loaded, "threads", None)

    async def _inner(self) -> Embedder:
        async with self._lock:
            if self._loaded is None:
                self._loaded = await self._build()
            return self._loaded

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await (await self._inner()).embed(texts)

    async def aclose(self) -> None:
        if self._loaded is not None:
            await self._loaded.aclose()
