"""Group commit for adds: concurrent adds share one transaction, one statement and one WAL
flush instead of paying one each.

Each add (one POST, single or batch) submits its drafts as a group and waits. A flusher task
takes every group queued so far (up to `max_rows` memories), stores them with one statement
(MemoryRepository.add: a group with a taken key stores nothing) and commits, then answers
each add; adds that arrive during a flush queue for the next one. So at one client an add
waits for no one (its flush starts at once), and under load the flushes grow with the
queue. Each add is acknowledged only after the commit that made it durable.

Up to `flushes` flusher tasks run at once, each on its own connection (`HTM_GROUP_COMMIT_
FLUSHES`, default 2): an add arriving while every flusher is busy queues for the next free
one. One flusher would put every INSERT of the process on one PostgreSQL backend, i.e. one
core: a bulk load of 500-memory batches then ran at 0.46x a raw COPY with two in flight
(bench/README.md, "Figures behind the code"). Concurrent flushes are independent
transactions: a key claimed by both is decided by the unique index (one waits for the
other's commit, then answers 409), and a deadlock between them fails their flushes, which
are then retried group by group like any failed flush.

A flush that fails as a whole (a row the database refuses, an outage, a deadlock) is retried
group by group, each in its own transaction, so a failing add fails alone.
"""

from __future__ import annotations

import asyncio
import logging

from app.db.session import Sessionmaker
from app.db.vectors import StoredVectors
from app.memories.model import AddGroup, GroupStored
from app.memories.repository import MemoryRepository

log = logging.getLogger(__name__)

_Pending = tuple[AddGroup, "asyncio.Future[GroupStored]"]


class GroupCommit:
    def __init__(
        self,
        sessionmaker: Sessionmaker,
        vectors: StoredVectors,
        max_rows: int = 1000,
        enrich: bool = False,
        flushes: int = 2,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.enrich = enrich  # an LLM is configured: new memories queue for enrichment
        self.vectors = vectors
        self.max_rows = max(1, max_rows)
        self.flushes = max(1, flushes)
        self._queue: list[_Pending] = []
        self._flushers: set[asyncio.Task[None]] = set()
        # Counters (tests, and /metrics): transactions committed, adds they stored, and
        # the memories those stored (a group refused for a taken key stores none).
        self.commits = 0
        self.adds = 0
        self.memories = 0

    async def store(self, group: AddGroup) -> GroupStored:
        """Store the group (durably, committed) with whatever else is queued."""
        future: asyncio.Future[GroupStored] = asyncio.get_running_loop().create_future()
        self._queue.append((group, future))
        # A flusher whose loop found the queue empty is done at once (its done callbacks
        # come later), so count the running ones: none may be trusted to take this add.
        self._flushers = {t for t in self._flushers if not t.done()}
        if len(self._flushers) < self.flushes:
            # Its own task: a cancelled request must not strand the others' answers.
            self._flushers.add(asyncio.create_task(self._drain(), name="add-group-commit"))
        return await asyncio.shield(future)

    def _take(self) -> list[_Pending]:
        taken: list[_Pending] = []
        rows = 0
        while self._queue and (not taken or rows + len(self._queue[0][0].drafts) <= self.max_rows):
            item = self._queue.pop(0)
            taken.append(item)
            rows += len(item[0].drafts)
        return taken

    async def _drain(self) -> None:
        while self._queue:
            batch = self._take()
            try:
                await self._flush(batch)
            except BaseException as exc:  # cancelled at shutdown: no add is left waiting
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                raise

    async def _flush(self, batch: list[_Pending]) -> None:
        try:
            results = await self._commit([g for g, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                if not batch[0][1].done():
                    batch[0][1].set_exception(exc)
                return
            log.warning(
                "a group commit of %d adds failed (%s); retrying each alone", len(batch), exc
            )
            for item in batch:
                await self._flush([item])
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _commit(self, groups: list[AddGroup]) -> list[GroupStored]:
        async with self.sessionmaker() as session, session.begin():
            storage = await self.vectors.storage(session)
            results = await MemoryRepository(session).add(groups, storage, self.enrich)
        self.commits += 1
        self.adds += len(groups)
        self.memories += sum(len(r.claimed) for r in results)
        return results

    async def aclose(self) -> None:
        """Wait for the adds already queued (at shutdown, after the server stopped taking
        requests)."""
        await asyncio.gather(*self._flushers, return_exceptions=True)
