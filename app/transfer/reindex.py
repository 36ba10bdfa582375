"""`htm reindex`: after a change of HTM_SEARCH_TEXT (or, with `--vectors`, of HTM_EMBED_TEXT:
every one is embedded again), the namespace's conversation memories get
the search text the deployment's template now builds (app/memories/search_text.py, each turn
before read as stored now), and those whose text changed are embedded again by the embedding
worker's own code, a page at a time, as `htm reembed` does (app/transfer/reembed.py).

A page of memories is read in (created_at, id) order and the texts that differ are written in
one transaction; each of those rows becomes pending, first in the worker's queue, and its
search_tsv (generated from the text) is right at once. The worker's passes embed the page's
rows before the next page is read, so at most about one page is out of vector search at a
time (full text and hybrid's text list still find it). A client's vector (embedding_model
'client') is kept: only its text, so its full-text entry, changes. A memory rewritten while
its page is read keeps the text its write built. Running it again rebuilds nothing."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.progress import Progress

from app.components import Components
from app.errors import NotFound
from app.memories.search_text import Written, search_texts
from app.memories.turn_repository import TurnRepository
from app.transfer.reembed import STALL_S, Stalled
from app.transfer.repository import TransferRepository


@dataclass
class Reindexed:
    checked: int = 0  # conversation memories (and any other with a search text) read
    rebuilt: int = 0  # their search text written
    embedded: int = 0  # of those, given their new vector
    failed: int = 0  # of those, refused by the provider ('failed')


async def _page(
    c: Components, ns_id: int, after: tuple[datetime, int] | None, batch: int, vectors: bool
) -> tuple[list[Any], int, list[tuple[int, datetime]]]:
    """(the page's rows, how many got a new text (with `vectors`: were written), those now
    waiting for a vector)."""
    async with c.sessionmaker() as session, session.begin():
        repo = TransferRepository(session)
        rows = list(await repo.reindex_page(ns_id, after, batch))
        if not rows:
            return [], 0, []
        searched = await search_texts(
            TurnRepository(session),
            c.settings.search_text,
            ns_id,
            now=c.clock(),
            items=[Written(r.content, r.created_at, r.metadata) for r in rows],
        )
        texts = [s.text for s in searched]
        changed = [i for i, r in enumerate(rows) if vectors or r.search_text != texts[i]]
        if not changed:
            return rows, 0, []
        rebuilt, waiting = await repo.set_search_texts(
            [rows[i] for i in changed], [texts[i] for i in changed], every=vectors
        )
    return rows, rebuilt, waiting


async def _embed(
    c: Components, namespace: str, rows: list[tuple[int, datetime]], *, batch: int, stall_s: float
) -> tuple[int, int]:
    """The worker's passes until none of `rows` waits: (embedded, failed)."""
    last, moved_at = len(rows) + 1, time.monotonic()
    while True:
        async with c.sessionmaker() as session:
            ready, failed, left = await TransferRepository(session).vector_states(rows)
        if left == 0:
            return ready, failed
        if left < last:
            last, moved_at = left, time.monotonic()
        elif time.monotonic() - moved_at > stall_s:
            raise Stalled(
                f"{left} memories of namespace {namespace!r} wait for an embedding of their new "
                f"search text and none was embedded for {stall_s:.0f} s (is the provider "
                "failing?). Their texts are written and they stay pending for the service's "
                "embedding worker; run `htm reindex` again to go on, `htm reembed` to follow"
            )
        if not await c.embedding_worker.run_once(batch):
            await asyncio.sleep(0.2)  # leased by another worker, or backing off


async def reindex(
    c: Components,
    namespace: str,
    batch: int,
    progress: Progress | None = None,
    *,
    stall_s: float = STALL_S,
    vectors: bool = False,
) -> Reindexed:
    """With `vectors`, every conversation memory is embedded again, its text changed or not
    (after a change of HTM_EMBED_TEXT: what its vector is made of)."""
    async with c.sessionmaker() as session:
        repo = TransferRepository(session)
        ns_id = await repo.namespace_id(namespace)
        if ns_id is None:
            raise NotFound(f"namespace {namespace!r} does not exist")
        total = await repo.count_reindex(ns_id)
    task = progress.add_task(f"reindex {namespace}", total=total) if progress else None
    done = Reindexed()
    after: tuple[datetime, int] | None = None
    while True:
        rows, rebuilt, waiting = await _page(c, ns_id, after, batch, vectors)
        if not rows:
            return done
        after = (rows[-1].created_at, rows[-1].id)
        done.checked += len(rows)
        done.rebuilt += rebuilt
        if waiting:
            embedded, failed = await _embed(c, namespace, waiting, batch=batch, stall_s=stall_s)
            done.embedded += embedded
            done.failed += failed
        if progress is not None and task is not None:
            progress.update(task, completed=min(total, done.checked))
