"""Micro-batching: many concurrent embed() calls become few provider calls.

Every provider is far cheaper per text in batches (one forward pass, one HTTP round trip), and
requests adding one memory each arrive concurrently. Texts queue here; one background task
sends them in batches of at most `max_batch`, one batch at a time, and routes each vector back
to the caller that asked for it.

A text that arrives while the batcher is idle (no batch with the provider, none queued) is
sent at once, with whatever else arrived in the same turn of the event loop: a lone question
never waits for company that is not coming. Texts that arrive while a batch is with the
provider queue behind it and form the next batch: that is where batching pays, when calls
come faster than the provider answers. They are sent when the running batch is done, or
`max_wait_ms` after the first of them arrived if that is later (default 0: as soon as the
provider is free), or as soon as `max_batch` of them are waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from app.embeddings.base import Embedder, EmbeddingError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Request:
    """One caller's embed() call, possibly spread over several batches."""

    future: asyncio.Future[list[list[float]]]
    vectors: list[list[float]]
    missing: int


@dataclass(slots=True)
class _Item:
    text: str
    request: _Request
    position: int
    # When it is due to be sent (loop time): on arrival at an idle batcher, then; behind a
    # running batch, max_wait_ms later.
    due: float = field(default=0.0)


class MicroBatcher:
    """An Embedder that coalesces concurrent calls to another Embedder.

    Use it from one event loop. A caller whose texts exceed `max_batch` is split over several
    batches; if any of them fails, that caller gets the EmbeddingError, as does every other
    caller with a text in the failed batch. The next batch is unaffected.
    """

    def __init__(self, embedder: Embedder, max_batch: int, max_wait_ms: float) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        self.embedder = embedder
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self._pending: deque[_Item] = deque()
        self._wakeup = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._sending = False  # a batch is with the provider
        self._closing = False
        self._closed = False

    @property
    def provider(self) -> str:
        return self.embedder.provider

    @property
    def model(self) -> str:
        return self.embedder.model

    @property
    def dimension(self) -> int:
        return self.embedder.dimension

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self._closing:
            raise EmbeddingError(f"the {self.provider} embedder is closed")
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        request = _Request(loop.create_future(), [[] for _ in texts], len(texts))
        now = loop.time()
        was_empty = not self._pending
        due = now if was_empty and not self._sending else now + self.max_wait_s
        self._pending.extend(_Item(t, request, i, due) for i, t in enumerate(texts))
        # The runner sleeps until the first text arrives, then until it is due or the batch is
        # full; waking it for anything in between would only make it recompute the same.
        if was_empty or len(self._pending) >= self.max_batch:
            self._wakeup.set()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="embedding-micro-batcher")
        return await request.future

    async def aclose(self) -> None:
        """Send everything already queued, wait for it, then close the provider."""
        if self._closed:
            return
        self._closing = True
        self._wakeup.set()
        if self._runner is not None:
            await self._runner
        if not self._closed:
            self._closed = True
            await self.embedder.aclose()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if len(self._pending) < self.max_batch and not self._closing:
                    delay = self._pending[0].due - loop.time()
                    if delay > 0:
                        self._wakeup.clear()
                        try:
                            async with asyncio.timeout(delay):
                                await self._wakeup.wait()
                        except TimeoutError:
                            pass
                        continue
                batch = self._take_batch()
                if batch:
                    self._sending = True
                    try:
                        await self._send(batch)
                    finally:
                        self._sending = False
        finally:
            # Empty after a normal close; after a cancellation (loop shutdown) it may not be,
            # and no caller may be left waiting forever.
            while self._pending:
                future = self._pending.popleft().request.future
                if not future.done():
                    future.set_exception(EmbeddingError("the embedding batcher stopped"))

    def _take_batch(self) -> list[_Item]:
        batch: list[_Item] = []
        while self._pending and len(batch) < self.max_batch:
            item = self._pending.popleft()
            # A cancelled caller's texts are not worth embedding.
            if not item.request.future.done():
                batch.append(item)
        return batch

    async def _send(self, batch: list[_Item]) -> None:
        try:
            vectors = await self.embedder.embed([item.text for item in batch])
            if len(vectors) != len(batch):
                raise EmbeddingError(
                    f"{self.provider} returned {len(vectors)} vectors for {len(batch)} texts",
                    transient=False,
                )
        except asyncio.CancelledError:
            self._fail(batch, EmbeddingError("the embedding batcher stopped"))
            raise
        except Exception as exc:
            if not isinstance(exc, EmbeddingError):
                log.exception("embedding provider %s raised unexpectedly", self.provider)
            self._fail(batch, exc)
            return
        for item, vector in zip(batch, vectors, strict=True):
            request = item.request
            if request.future.done():
                continue
            request.vectors[item.position] = vector
            request.missing -= 1
            if request.missing == 0:
                request.future.set_result(request.vectors)

    @staticmethod
    def _fail(batch: list[_Item], exc: Exception) -> None:
        for request in {id(item.request): item.request for item in batch}.values():
            if not request.future.done():
                # One exception object per caller: raising a shared one from many tasks
                # would keep appending their tracebacks to it.
                error = EmbeddingError(
                    str(exc) or type(exc).__name__, transient=getattr(exc, "transient", True)
                )
                error.__cause__ = exc
                request.future.set_exception(error)
