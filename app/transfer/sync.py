"""Bring keys of a namespace to a wanted state through MemoryService, as PUT and DELETE
would, writing nothing for a key already in that state: what makes `htm import` idempotent
and resumable and `htm load` a file sync."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from app.auth.caller import Caller
from app.components import Components
from app.errors import Conflict
from app.memories.schemas import MemoryCreate, MemoryUpsert
from app.transfer.repository import TransferRepository
from app.unit import unit_of_work


@dataclass
class Wanted:
    key: str
    author: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime | None = None  # None: now when added, unchanged when updated
    confidence: float | None = None
    source: str | None = None
    deleted: bool = False
    embedding: list[float] | None = None  # a vector to reuse, made by `embedding_model`
    embedding_model: str | None = None
    valid_from: datetime | None = None  # valid time: None from created_at, open-ended
    valid_to: datetime | None = None
    visibility: str = "namespace"  # who may read it (app/visibility.py)
    readers: list[str] = field(default_factory=list)
    pool: str | None = None
    archived: str | None = None  # deleted by this retention rule
    # The keys it supersedes when it is added (those still current then).
    supersedes: list[str] = field(default_factory=list)
    # Accesses it had (what retention judges): a memory with fewer is given these.
    access_count: int = 0
    last_accessed_at: datetime | None = None
    # What feedback taught it (scale, shift, used, unused, pinned, forgotten nearby:
    # app/memories/learning.py)
    feedback: tuple[float, float, int, int, int, int] | None = None
    # Superseded by a memory the import adds later: wanted current and live until that one
    # supersedes it (which ends its validity), not yet as it ends up.
    superseded_later: bool = False


@dataclass
class Counts:
    added: int = 0
    updated: int = 0
    forgotten: int = 0
    unchanged: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        self.added += other.added
        self.updated += other.updated
        self.forgotten += other.forgotten
        self.unchanged += other.unchanged
        return self


def same_fields(w: Wanted, row: Any) -> bool:
    return (
        (row.content, row.type, row.importance, list(row.tags), row.metadata)
        == (
            w.content,
            w.type,
            w.importance,
            w.tags,
            w.metadata,
        )
        and (w.created_at is None or w.created_at == row.created_at)
        and (row.confidence, row.source) == (w.confidence, w.source)
        and (
            row.valid_from,
            row.valid_to,
        )
        == (w.valid_from, w.valid_to)
        and (row.visibility, list(row.readers), row.pool) == (w.visibility, w.readers, w.pool)
    )


def same(w: Wanted, row: Any) -> bool:
    return (
        (row.deleted_at is not None) == w.deleted
        and (not w.deleted or row.archived == w.archived)
        and same_fields(w, row)
    )


def as_now(w: Wanted, row: Any) -> Wanted:
    """The state `w` is wanted in now: one `superseded_later` is current and live until it
    is superseded."""
    if w.superseded_later and (row is None or row.superseded_by is None):
        return replace(w, valid_to=None, deleted=False, archived=None, superseded_later=False)
    return w


def fields(w: Wanted, *, vector: bool) -> dict[str, Any]:
    return {
        "content": w.content,
        "type": w.type,
        "importance": w.importance,
        "confidence": w.confidence,
        "source": w.source,
        "tags": w.tags,
        "metadata": w.metadata,
        "created_at": w.created_at,
        "embedding": w.embedding if vector else None,
        "valid_from": w.valid_from,
        "valid_to": w.valid_to,
        "visibility": w.visibility,
        "readers": w.readers or None,
        "pool": w.pool,
    }


async def apply(c: Components, caller: Caller, wanted: list[Wanted]) -> Counts:
    """One batch (its keys distinct). New keys are added together per author (one group
    commit), to long-term memory only; changed ones are PUT one by one (which re-places them
    where working memory holds them); a wanted delete is a soft forget, or the archive of
    the retention rule the memory names. A memory that supersedes others is added in a
    transaction of its own with those still current (`supersedes`)."""
    superseded = [k for w in wanted for k in w.supersedes]
    async with unit_of_work(c, caller) as r:
        current = await TransferRepository(r.session).current(
            caller.namespace_id, [w.key for w in wanted] + superseded
        )
    batch = _Batch(c, caller)
    new: dict[str, list[Wanted]] = defaultdict(list)
    changed: list[Wanted] = []
    for w in wanted:
        row = current.get(w.key)
        w = as_now(w, row)
        if w.supersedes:  # only those still current: the others were superseded before
            w = replace(w, supersedes=[k for k in w.supersedes if _current(current.get(k))])
        if row is None:
            new[w.author].append(w)
        elif same(w, row):
            batch.counts.unchanged += 1
        else:
            changed.append(w)
    for author, group in new.items():
        if not await batch.add(author, group):
            changed += group
    for w in changed:
        await batch.update(w, current.get(w.key))
    await batch.name_models()
    await batch.carry_accesses([w for w in wanted if _accessed(w, current.get(w.key))])
    await batch.carry_feedback([w for w in wanted if _taught(w, current.get(w.key))])
    return batch.counts


class _Batch:
    """One batch's writes, each in a unit of work of its own: what they did (`counts`) and
    the models named for the vectors they stored (`models`)."""

    def __init__(self, c: Components, caller: Caller) -> None:
        self.c = c
        self.caller = caller
        self.counts = Counts()
        self.models: dict[str, str] = {}

    async def add(self, author: str, group: list[Wanted]) -> bool:
        """New keys of one author, together; False (nothing added) when one was added
        meanwhile (another import): they are PUT instead."""
        try:
            async with unit_of_work(self.c, self.caller) as r:
                # Every key is wanted as it is: no near-duplicate rule merges two of them,
                # and what it supersedes is named (the detector finds nothing of its own).
                bodies = [
                    MemoryCreate(
                        key=w.key,
                        dedupe="off",
                        supersede="off",
                        supersedes=w.supersedes,
                        **fields(w, vector=True),
                    )
                    for w in group
                ]
                # Long-term memory only: an import restores history, and placing it would
                # evict what the robots are focused on now (as `working_memory: false`).
                added = await r.memories.add_many(author, bodies, place=False)
            self.counts.added += len(group)
        except Conflict:
            return False
        self.models.update(
            {w.key: w.embedding_model for w in group if w.embedding_model and _named(w)}
        )
        for w, a in zip(group, added, strict=True):
            if w.deleted:
                await delete(self.c, self.caller, w, a.version)
                self.counts.forgotten += 1
        return True

    async def update(self, w: Wanted, row: Any) -> None:
        """A key stored otherwise (`row`: as it was read), PUT as wanted, then deleted if
        wanted so."""
        version = None if row is None else row.version
        if row is None or not (w.deleted and row.deleted_at is None and same_fields(w, row)):
            # The stored vector stays when the content does (a PUT keeps it).
            vector = row is None or row.content != w.content
            async with unit_of_work(self.c, self.caller) as r:
                body = MemoryUpsert(**fields(w, vector=vector))
                version = (await r.memories.upsert(w.author, w.key, body)).version
            if vector and _named(w):
                self.models[w.key] = w.embedding_model  # type: ignore[assignment]
            self.counts.updated += 1
        if w.deleted:
            await delete(self.c, self.caller, w, version)
            self.counts.forgotten += 1

    async def name_models(self) -> None:
        if self.models:
            async with unit_of_work(self.c, self.caller) as r:
                repo = TransferRepository(r.session)
                await repo.name_models(self.caller.namespace_id, self.models)

    async def carry_feedback(self, taught: list[Wanted]) -> None:
        if taught:
            async with unit_of_work(self.c, self.caller) as r:
                await TransferRepository(r.session).carry_feedback(
                    self.caller.namespace_id,
                    [w.key for w in taught],
                    [w.feedback for w in taught if w.feedback is not None],
                )

    async def carry_accesses(self, accessed: list[Wanted]) -> None:
        if accessed:
            async with unit_of_work(self.c, self.caller) as r:
                await TransferRepository(r.session).carry_accesses(
                    self.caller.namespace_id,
                    [w.key for w in accessed],
                    [w.access_count for w in accessed],
                    [w.last_accessed_at for w in accessed],
                )


def _taught(w: Wanted, row: Any) -> bool:
    """Whether `w` brings more feedback than the memory has had (as its row was before)."""
    if w.feedback is None:
        return False
    had = row.feedback if row is not None else None
    return sum(w.feedback[2:]) > (sum(had[2:]) if had else 0)


def _accessed(w: Wanted, row: Any) -> bool:
    """Whether `w` brings accesses the memory has not had (as its row was before)."""
    if row is None:
        return w.access_count > 0 or w.last_accessed_at is not None
    last = row.last_accessed_at
    return w.access_count > row.access_count or (
        w.last_accessed_at is not None and (last is None or w.last_accessed_at > last)
    )


def _named(w: Wanted) -> bool:
    return w.embedding is not None and w.embedding_model not in (None, "client")


def _current(row: Any) -> bool:
    """Live and valid, superseded by nothing: what an add may supersede."""
    return (
        row is not None
        and row.deleted_at is None
        and row.valid_to is None
        and row.superseded_by is None
    )


async def delete(c: Components, caller: Caller, w: Wanted, version: int | None) -> None:
    """A soft delete (restorable): as its retention rule archives it (at `version`, the
    memory's now), else as DELETE /v1/robots/{robot}/memories/{key}."""
    async with unit_of_work(c, caller) as r:
        if w.archived is not None and version is not None:
            await r.memories.archive(w.key, version, w.archived)
        else:
            # the file's feedback already holds the steps the forget gave its neighbours
            await r.memories.forget(w.author, w.key, hard=False, confirm=None, nearby=False)


async def forget(c: Components, caller: Caller, robot: str, key: str) -> None:
    """A soft delete (restorable), as DELETE /v1/robots/{robot}/memories/{key}, of a chunk
    `htm load` no longer finds in its file: replaced, not judged, so its neighbours (the
    file's other chunks, its new text) keep their learned importance."""
    async with unit_of_work(c, caller) as r:
        service = r.memories
        await service.forget(robot, key, hard=False, confirm=None, nearby=False)
