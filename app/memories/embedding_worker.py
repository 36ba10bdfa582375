"""Background worker: embeds memories stored as 'pending' (embedder down or slow at add time).

Rows are claimed with FOR UPDATE SKIP LOCKED, so any number of service instances can run it;
a failed batch backs off per row (2^attempts seconds, capped) instead of spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.embeddings import EmbeddingError
from app.memories.repository import MemoryRepository
from app.resources import Resources

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0


async def embed_pending_once(res: Resources, batch: int | None = None) -> int:
    """Embed one batch of pending memories; returns how many were embedded."""
    embedder = res.embedder
    if embedder is None:
        return 0
    async with res.sessionmaker() as session, session.begin():
        repo = MemoryRepository(session)
        rows = await repo.claim_pending(batch or res.settings.embedding_batch_size)
        if not rows:
            return 0
        keys = [(r.id, r.created_at) for r in rows]
        try:
            vectors = await asyncio.wait_for(
                embedder.embed([r.content for r in rows]), res.settings.embedding_timeout_s
            )
        except (EmbeddingError, TimeoutError) as exc:
            await repo.postpone_embeddings(keys, str(exc) or type(exc).__name__, MAX_BACKOFF_S)
            log.warning("embedding %d pending memories failed, will retry: %s", len(rows), exc)
            return 0
        await repo.set_embeddings(keys, vectors, embedder.model)
    return len(rows)


async def run_embedding_worker(res: Resources) -> None:
    """Loop until cancelled: drain pending rows, then sleep for the configured interval."""
    while True:
        try:
            while await embed_pending_once(res):
                pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("embedding worker iteration failed")
        await asyncio.sleep(res.settings.embedding_worker_interval_s)


@contextlib.asynccontextmanager
async def embedding_worker(res: Resources):  # type: ignore[no-untyped-def]
    task = asyncio.create_task(run_embedding_worker(res), name="embedding-worker")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
