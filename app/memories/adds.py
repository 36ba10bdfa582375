"""Group commit for adds: concurrent adds share one transaction, one statement and one WAL
flush instead of paying one each.

Each add (one POST, single or batch) submits its drafts as a group and waits. A flusher task
takes every group queued so far (up to `max_rows` memories and `max_chars` of content, see
below), stores them with one statement (MemoryRepository.add: a group with a taken key
stores nothing) and commits, then answers each add; adds that arrive during a flush queue
for the next one. So at one client an add waits for no one (its flush starts at once), and
under load the flushes grow with the queue. Each add is acknowledged only after the commit
that made it durable.

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

A statement's time grows with the content it indexes (to_tsvector and its GIN entries), and
HTM_STATEMENT_TIMEOUT_MS cuts off each statement: one INSERT of a batch inside every
documented limit (500 memories of 25 KB) took longer than the default 5 s and failed every
time. So a statement carries at most `max_chars` of content (`statement_chars`): a flush
takes no more adds than fit, and an add larger than that on its own is stored by statements
in its one transaction, which rolls back whole if any of its keys was taken (all or nothing,
as in one statement). Measured on the 2-core VM (one INSERT of 250 x 32 KB with client
vectors): 5.5 ms a memory of random words, 15 ms of random hex tokens (~2.1 M characters a
second, the slowest content tried); the budget is a fifth of that rate times the statement
timeout, 2 M characters at 5 s.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import replace

from app.config import VectorStorage
from app.db.deployment import is_citus
from app.db.session import DbSession, Sessionmaker
from app.db.vectors import StoredVectors
from app.memories.model import AddGroup, GroupStored, MemoryDraft
from app.memories.repository import MemoryRepository
from app.tracing import tracer

log = logging.getLogger(__name__)

_Pending = tuple[AddGroup, "asyncio.Future[GroupStored]"]

# Characters of content one INSERT takes per second of statement timeout: a fifth of the
# slowest rate measured (see above), so a statement stays well inside its timeout on a
# loaded machine.
CHARS_PER_TIMEOUT_S = 400_000


def statement_chars(statement_timeout_ms: int) -> int | None:
    """The content one statement may carry under this statement timeout (0: no timeout, no
    bound)."""
    if statement_timeout_ms <= 0:
        return None
    return max(1, statement_timeout_ms * CHARS_PER_TIMEOUT_S // 1000)


def _size(group: AddGroup) -> int:
    return sum(len(d.content) for d in group.drafts)


class _Refused(Exception):
    """A group stored by several statements found a key taken: its transaction rolls back."""

    def __init__(self, stored: GroupStored) -> None:
        super().__init__("a key of the group is taken")
        self.stored = stored


class GroupCommit:
    def __init__(
        self,
        sessionmaker: Sessionmaker,
        vectors: StoredVectors,
        max_rows: int = 1000,
        enrich: bool = False,
        flushes: int = 2,
        max_chars: int | None = statement_chars(5000),  # HTM_STATEMENT_TIMEOUT_MS' default
        apart: bool | None = None,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.enrich = enrich  # an LLM is configured: new memories queue for enrichment
        self.vectors = vectors
        self.max_rows = max(1, max_rows)
        self.flushes = max(1, flushes)
        self.max_chars = max_chars
        self._queue: list[_Pending] = []
        self._flushers: set[asyncio.Task[None]] = set()
        # Counters (tests, and /metrics): transactions committed, adds they stored, and
        # the memories those stored (a group refused for a taken key stores none); the
        # statements that stored them.
        self.statements = 0
        self.commits = 0
        self.adds = 0
        self.memories = 0
        # On Citus the add is several statements (MemoryRepository.add `apart`). None: read
        # at the first flush (a database does not become a Citus coordinator under a running
        # service).
        self._apart = apart

    async def store(self, group: AddGroup) -> GroupStored:
        """Store the group (durably, committed) with whatever else is queued."""
        future: asyncio.Future[GroupStored] = asyncio.get_running_loop().create_future()
        self._queue.append((group, future))
        # A flusher whose loop found the queue empty is done at once (its done callbacks
        # come later), so count the running ones: none may be trusted to take this add.
        self._flushers = {t for t in self._flushers if not t.done()}
        if len(self._flushers) < self.flushes:
            # Its own task: a cancelled request must not strand the others' answers. Its own
            # context too: it serves several requests, so its statements belong to none of
            # their traces (the request's wait is its `group commit` span).
            self._flushers.add(
                asyncio.create_task(
                    self._drain(), name="add-group-commit", context=contextvars.Context()
                )
            )
        with tracer.start_as_current_span("group commit"):
            return await asyncio.shield(future)

    def _take(self) -> list[_Pending]:
        """The adds of the next flush: as many as fit `max_rows` and one statement's
        `max_chars` (the first always: alone, it may take several statements)."""
        taken: list[_Pending] = []
        rows = chars = 0
        limit = self.max_chars if self.max_chars is not None else float("inf")
        while self._queue:
            group = self._queue[0][0]
            more_rows, more_chars = rows + len(group.drafts), chars + _size(group)
            if taken and (more_rows > self.max_rows or more_chars > limit):
                break
            taken.append(self._queue.pop(0))
            rows, chars = more_rows, more_chars
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
        try:
            async with self.sessionmaker() as session, session.begin():
                storage = await self.vectors.storage(session)
                apart = await self.apart(session)
                repo = MemoryRepository(session)
                if self.max_chars is not None and _size(groups[0]) > self.max_chars:
                    # Too large for one statement: alone in its flush (_take).
                    results = [await self._store_split(repo, groups[0], storage)]
                else:
                    results = await repo.add(groups, storage, self.enrich, apart=apart)
                    self.statements += 1
        except _Refused as refused:  # rolled back: the group stored nothing
            return [refused.stored]
        self.commits += 1
        self.adds += len(groups)
        self.memories += sum(len(r.claimed) for r in results)
        return results

    async def apart(self, session: DbSession) -> bool:
        """Whether adds on this database are stored apart (Citus), read once."""
        if self._apart is None:
            self._apart = await is_citus(session)
        return self._apart

    async def _store_split(
        self, repo: MemoryRepository, group: AddGroup, storage: VectorStorage
    ) -> GroupStored:
        """One add, in as many statements as its content needs, in the caller's
        transaction. A key taken anywhere raises _Refused once every part has run (the
        answer names every taken key), so the transaction drops what the others stored."""
        stored = GroupStored({}, [], None)
        for drafts in _parts(group, self.max_chars or 0):
            [part] = await repo.add(
                [replace(group, drafts=drafts)], storage, self.enrich, apart=bool(self._apart)
            )
            self.statements += 1
            stored.claimed.update(part.claimed)
            stored.taken += part.taken
            stored.now = part.now
        if stored.taken:
            raise _Refused(GroupStored({}, stored.taken, stored.now))
        return stored

    async def aclose(self) -> None:
        """Wait for the adds already queued (at shutdown, after the server stopped taking
        requests)."""
        await asyncio.gather(*self._flushers, return_exceptions=True)


def _parts(group: AddGroup, max_chars: int) -> Iterator[list[MemoryDraft]]:
    """The group's drafts in order, cut where the next would take a part past max_chars (a
    part holds at least one)."""
    part: list[MemoryDraft] = []
    chars = 0
    for draft in group.drafts:
        if part and chars + len(draft.content) > max_chars:
            yield part
            part, chars = [], 0
        part.append(draft)
        chars += len(draft.content)
    if part:
        yield part
