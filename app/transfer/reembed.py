"""`htm reembed`: after a change of model (of the same dimension: the service refuses to
start with another), the namespace's memories embedded by another model are embedded again
by the embedding worker's own code (app/memories/embedding_worker.py).

A batch at a time becomes pending (first in the worker's queue) and the worker's passes embed
it; the next batch is taken when the queue runs low. Recall keeps working meanwhile: a
pending memory keeps its old vector but vector search skips it (it reads ready rows only)
until its new vector is written, so at most about one batch is out of vector search at a
time (full text and hybrid's text list still find it). Stopping it loses nothing: the rows
marked are embedded by the service's worker, and running it again takes up the rest."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rich.progress import Progress

from app.components import Components
from app.errors import NotFound
from app.transfer.repository import TransferRepository

# No memory of the namespace embedded for this long: the provider is failing (the rows back
# off, and the service's worker keeps retrying them).
STALL_S = 30.0


class Stalled(Exception):
    pass


@dataclass
class Done:
    embedded: int
    failed: int


async def _counts(c: Components, ns_id: int, model: str, mark: int) -> tuple[int, int]:
    """(rows still to embed, failed rows), after marking up to `mark` more rows pending."""
    async with c.sessionmaker() as session, session.begin():
        repo = TransferRepository(session)
        stale, pending, failed = await repo.count_reembed(ns_id, model)
        if stale and pending < mark:
            await repo.mark_pending(ns_id, model, mark - pending)
    return stale + pending, failed


async def reembed(
    c: Components,
    namespace: str,
    batch: int,
    progress: Progress | None = None,
    *,
    stall_s: float = STALL_S,
) -> Done:
    model = c.embedder.model
    assert model is not None  # the command checks the embedder first
    async with c.sessionmaker() as session:
        ns_id = await TransferRepository(session).namespace_id(namespace)
    if ns_id is None:
        raise NotFound(f"namespace {namespace!r} does not exist")
    total, failed = await _counts(c, ns_id, model, 0)
    task = progress.add_task(f"reembed {namespace}", total=total) if progress else None
    left, last_left, moved_at = total, total, time.monotonic()
    while True:
        left, failed = await _counts(c, ns_id, model, batch)
        if progress is not None and task is not None:
            progress.update(task, completed=max(0, total - left))
        if left == 0:
            return Done(embedded=total - left, failed=failed)
        if left < last_left:
            last_left, moved_at = left, time.monotonic()
        elif time.monotonic() - moved_at > stall_s:
            raise Stalled(
                f"{left} memories of namespace {namespace!r} wait for an embedding and none "
                f"was embedded for {stall_s:.0f} s (is the provider failing?). They stay "
                "pending for the service's embedding worker; run `htm reembed` again to follow"
            )
        if not await c.embedding_worker.run_once(batch):
            await asyncio.sleep(0.2)  # leased by another worker, or backing off
