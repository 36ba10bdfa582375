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

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from app.embeddings import EmbeddingError
from app.errors import ServiceUnavailable
from app.memories.repository import MemoryRepository
from app.resources import Resources

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0
MAX_ATTEMPTS = 5


@dataclass
class _Outcome:
    done: list[tuple[Any, list[float]]] = field(default_factory=list)
    # rows that failed together, and why
    failed: list[tuple[list[Any], EmbeddingError]] = field(default_factory=list)


async def _embed(res: Resources, rows: list[Any], out: _Outcome) -> None:
    """Embed rows; on an error that is the texts' own, split the batch to isolate them."""
    embedder = res.embedder
    assert embedder is not None
    try:
        vectors = await asyncio.wait_for(
            embedder.embed([r.content for r in rows]), res.settings.embedding_timeout_s
        )
    except TimeoutError:
        error = EmbeddingError(
            f"embedding timed out after {res.settings.embedding_timeout_s:g}s", transient=True
        )
        out.failed.append((rows, error))
        return
    except EmbeddingError as exc:
        if exc.transient or len(rows) == 1:
            out.failed.append((rows, exc))
            return
        half = len(rows) // 2
        await _embed(res, rows[:half], out)
        await _embed(res, rows[half:], out)
        return
    out.done.extend(zip(rows, vectors, strict=True))


async def embed_pending_once(res: Resources, batch: int | None = None) -> int:
    """Embed one leased batch of pending memories; returns how many were embedded."""
    embedder = res.embedder
    if embedder is None:
        return 0
    s = res.settings
    # Long enough for the batch to be split down to single texts, each within the timeout.
    lease_s = s.embedding_timeout_s * 2 * max(1, (batch or s.embedding_batch_size)) + 30
    async with res.sessionmaker() as session, session.begin():
        rows = await MemoryRepository(session).lease_pending(
            batch or s.embedding_batch_size, lease_s
        )
    if not rows:
        return 0
    out = _Outcome()
    await _embed(res, list(rows), out)
    async with res.sessionmaker() as session, session.begin():
        repo = MemoryRepository(session)
        if out.done:
            await repo.set_embeddings(
                [r for r, _ in out.done], [v for _, v in out.done], embedder.model
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


async def run_embedding_worker(res: Resources) -> None:
    """Loop until cancelled: drain pending rows, then sleep for the configured interval."""
    while True:
        try:
            while await embed_pending_once(res):
                pass
        except asyncio.CancelledError:
            raise
        except ServiceUnavailable as exc:  # the database is down: try again next interval
            log.warning("embedding worker paused: %s", exc.detail)
        except Exception:
            log.exception("embedding worker iteration failed")
        await asyncio.sleep(res.settings.embedding_worker_interval_s)


@contextlib.asynccontextmanager
async def embedding_worker(res: Resources) -> AsyncIterator[asyncio.Task]:
    task = asyncio.create_task(run_embedding_worker(res), name="embedding-worker")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
