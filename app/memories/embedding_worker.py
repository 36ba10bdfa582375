"""Background worker: embeds memories stored as 'pending' (embedder down or slow at add time).

Each pass leases a batch in a short transaction (the rows' embedding_next_at moves to the
lease's end, so any number of service instances can run the worker, and rows a dead worker
held come back when the lease ends), calls the provider with no transaction open, and writes
the results in another short transaction. A vector is stored only if the memory's content is
still the one embedded.

Failures:
- the provider unreachable, timing out or overloaded (a transient EmbeddingError): the whole
  batch backs off (2^attempts seconds, capped) and is retried as long as that lasts;
- the provider refusing texts or returning unusable vectors for them: the batch is split in
  halves until the texts at fault are alone, so one text cannot keep others out of vector
  search; a text that keeps failing is marked 'failed' after MAX_ATTEMPTS (the API and the
  stats show it; a PUT with new content makes it pending again).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.db.session import Sessionmaker
from app.db.vectors import StoredVectors
from app.embeddings import EmbeddingError
from app.embeddings.timed import TimedEmbedder
from app.memories.embedding_repository import EmbeddingRepository
from app.memories.search_text import EmbedText, vector_input

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0
MAX_ATTEMPTS = 5


@dataclass
class _Outcome:
    done: list[tuple[Any, list[float]]] = field(default_factory=list)
    # rows that failed together, and why
    failed: list[tuple[list[Any], EmbeddingError]] = field(default_factory=list)


class EmbeddingWorker:
    """Embeds pending memories, a leased batch per pass (run by app/workers.periodic)."""

    def __init__(
        self,
        sessionmaker: Sessionmaker,
        embedder: TimedEmbedder,
        batch_size: int,
        vectors: StoredVectors,
        embed_text: EmbedText = "search_text",
    ) -> None:
        self.sessionmaker = sessionmaker
        self.vectors = vectors
        self.embedder = embedder
        self.batch_size = batch_size
        self.embed_text: EmbedText = embed_text

    async def _embed(self, rows: list[Any], out: _Outcome) -> None:
        """Embed rows; on an error that is the texts' own, split the batch to isolate them."""
        try:
            vectors = await self.embedder.embed(
                [vector_input(r.content, r.metadata, r.search_text, self.embed_text) for r in rows]
            )
        except EmbeddingError as exc:
            if exc.transient or len(rows) == 1:
                out.failed.append((rows, exc))
                return
            half = len(rows) // 2
            await self._embed(rows[:half], out)
            await self._embed(rows[half:], out)
            return
        out.done.extend(zip(rows, vectors, strict=True))

    async def run_once(self, batch: int | None = None) -> int:
        """Embed one leased batch of pending memories; returns how many were embedded."""
        if not self.embedder.available:
            return 0
        size = batch or self.batch_size
        # Long enough for the batch to be split down to single texts, each within the timeout.
        lease_s = self.embedder.timeout_s * 2 * max(1, size) + 30
        async with self.sessionmaker() as session, session.begin():
            rows = await EmbeddingRepository(session).lease_pending(size, lease_s)
        if not rows:
            return 0
        out = _Outcome()
        await self._embed(list(rows), out)
        model = self.embedder.model
        assert model is not None  # available, checked above
        async with self.sessionmaker() as session, session.begin():
            repo = EmbeddingRepository(session)
            if out.done:
                await repo.set_embeddings(
                    [r for r, _ in out.done],
                    [v for _, v in out.done],
                    model,
                    await self.vectors.storage(session),
                )
            for failed, exc in out.failed:
                await repo.postpone_embeddings(
                    failed,
                    str(exc) or type(exc).__name__,
                    max_backoff_s=MAX_BACKOFF_S,
                    give_up_after=None if exc.transient else MAX_ATTEMPTS,
                )
                log.warning(
                    "embedding %d pending memories failed (%s), will retry: %s",
                    len(failed),
                    "provider unavailable" if exc.transient else "refused",
                    exc,
                )
        return len(out.done)

    async def drain(self) -> None:
        """Passes until none finds work (one periodic pass)."""
        while await self.run_once():
            pass
