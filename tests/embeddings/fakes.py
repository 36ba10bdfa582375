"""Small Embedder implementations for the batcher tests (our protocol, not a third party)."""

from __future__ import annotations

import asyncio

from app.embeddings import Embedder


def vector_for(text: str) -> list[float]:
    """A vector that identifies its text, e.g. "t17" → [17.0, 1.0]."""
    return [float(text.removeprefix("t")), 1.0]


class CountingFake:
    """Records each batch it is asked for; fails the next one when told to."""

    provider, model, dimension = "fake", "fake-model", 2

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[list[str]] = []
        self.delay_s = delay_s
        self.fail_next: Exception | None = None
        self.closed = False

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return [vector_for(t) for t in texts]

    async def aclose(self) -> None:
        self.closed = True


class ShortFake(CountingFake):
    """Answers one vector too few: a broken provider."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return (await super().embed(texts))[:-1]


class CountingWrapper:
    """Counts the calls reaching a real embedder; leaves closing it to its owner."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.provider, self.model, self.dimension = inner.provider, inner.model, inner.dimension
        self.calls: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return await self.inner.embed(texts)

    async def aclose(self) -> None:
        pass
