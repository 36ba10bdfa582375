"""`htm import`: a file written by `htm export`, into a namespace, through the services.

First the check (app/transfer/plan.py): every line, and every name a line refers to, before
anything is written. Then, in the order things depend on each other, each step skipping what
the namespace has already (so importing a file again writes nothing, and an import cut off is
finished by running it again): the robots and groups, the pools memories are written into
(open to their authors meanwhile), the memories in batches (app/transfer/sync.py), then one
at a time those that supersede others (once those are in) or belong to a group their author
is not in at the end (written while it is), then the pools as the file has them, the
retention policies and the maintenance schedule, the explicit links and the snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from rich.progress import Progress

from app.auth.caller import Caller
from app.components import Components
from app.db.vectors import stored_dimension
from app.errors import NotFound
from app.transfer import kinds
from app.transfer.format import Record
from app.transfer.plan import Plan, check, wanted
from app.transfer.reading import memories
from app.transfer.sync import Counts, Wanted, apply
from app.unit import operator, unit_of_work

# Memories per batch (at most the deployment's max_batch_size), and batches applied at once:
# two keep two PostgreSQL backends busy, as the batch endpoint's clients do (bench/README.md
# has the rate beside a raw COPY).
BATCH = 500
IN_FLIGHT = 2


def reusable(r: Record, model: str | None, dimension: int | None) -> bool:
    """A vector is kept when this deployment would have made the same one (same model, same
    dimension), or when a client gave it (the API stores those as given); else the memory is
    embedded again here."""
    if r.embedding is None or len(r.embedding) != dimension:
        return False
    return r.embedding_model == "client" or (model is not None and r.embedding_model == model)


async def import_file(
    c: Components,
    path: Path,
    namespace: str | None,
    *,
    progress: Progress | None = None,
    batch_size: int | None = None,
) -> tuple[str, Counts, kinds.Written]:
    """Checks the file, then imports it; returns the namespace, what changed among its
    memories, and what else was written."""
    plan = await check(c, path, namespace)
    caller = await operator(c, plan.namespace)
    done = kinds.Written()
    await kinds.robots(c, caller, plan, done)
    await kinds.groups(c, caller, plan, done)
    await kinds.stage_pools(c, caller, plan, done)
    counts = await _memories(c, caller, path, plan=plan, progress=progress, batch_size=batch_size)
    await kinds.finish_pools(c, caller, plan, done)
    await kinds.namespace_settings(c, caller, plan, done)
    await kinds.links(c, caller, plan, done)
    await kinds.snapshots(c, caller, path, done)
    return plan.namespace, counts, done


async def _memories(
    c: Components,
    caller: Caller,
    path: Path,
    *,
    plan: Plan,
    progress: Progress | None,
    batch_size: int | None,
) -> Counts:
    """The memories in batches, then one at a time those deferred, then what the superseded
    ones end as."""
    async with c.sessionmaker() as session:
        dimension = await stored_dimension(session)
    model = c.embedder.model
    advance = _advancer(progress, f"import {plan.namespace}", plan.memories)
    size = min(batch_size or BATCH, c.settings.max_batch_size)
    batches = _InFlight(c, caller, size=size, advance=advance)
    later: list[tuple[tuple[object, ...], Wanted, str | None]] = []  # written one at a time
    superseded = plan.superseded
    ends: dict[str, Wanted] = {}  # what a superseded memory ends as, once superseded
    try:
        for n, r in memories(path):
            keep = reusable(r, model, dimension)
            w = wanted(r, keep_vector=keep, superseded_later=r.key in superseded)
            if r.key in superseded:
                ends[r.key] = wanted(r, keep_vector=keep)
            if r.key in plan.deferred:
                w.supersedes = plan.supersedes.get(r.key, [])
                group = r.group if w.visibility == "group" else None
                later.append(((w.valid_from or w.created_at, n), w, group))
            else:
                await batches.put(r.key, w)
        counts = await batches.finish()
    finally:  # an error (or Ctrl-C) leaves no batch running on its own
        batches.cancel()
    # A memory superseding others after them, in the order of their validity: a chain's
    # links one after the other.
    for _, w, group in sorted(later, key=lambda x: x[0]):
        async with _member(c, caller, w.author, group):
            counts += await apply(c, caller, [w])
        advance(1)
    ended = list(ends.values())
    for i in range(0, len(ended), size):
        after = await apply(c, caller, ended[i : i + size])
        counts.updated += after.updated
        counts.forgotten += after.forgotten
    return counts


def _advancer(progress: Progress | None, title: str, total: int) -> Callable[[int], None]:
    """What moves the bar of a new task on `progress` (nothing without one)."""
    if progress is None:
        return lambda n: None
    task = progress.add_task(title, total=total)
    return lambda n: progress.advance(task, n)


class _InFlight:
    """Batches of `size` applied, up to IN_FLIGHT at once, with their keys: a key repeated in
    the file waits until every batch holding it is applied, so the file's lines still apply
    in order, key by key."""

    def __init__(
        self, c: Components, caller: Caller, *, size: int, advance: Callable[[int], None]
    ) -> None:
        self.c = c
        self.caller = caller
        self.size = size
        self.advance = advance
        self.batch: dict[str, Wanted] = {}
        self.flying: list[tuple[asyncio.Task[Counts], set[str]]] = []
        self.counts = Counts()

    async def put(self, key: str, w: Wanted) -> None:
        # A repeated key applies after every earlier line of it has.
        repeat = key in self.batch or any(key in keys for _, keys in self.flying)
        if repeat or len(self.batch) >= self.size:
            await self._flush()
        if repeat:
            await self._land(all_of_them=True)
        self.batch[key] = w

    async def finish(self) -> Counts:
        """Every batch applied; what they did."""
        await self._flush()
        await self._land(all_of_them=True)
        return self.counts

    def cancel(self) -> None:
        for running, _ in self.flying:
            running.cancel()

    async def _land(self, *, all_of_them: bool) -> None:
        while self.flying and (all_of_them or len(self.flying) >= IN_FLIGHT):
            done, keys = self.flying.pop(0)
            self.counts += await done
            self.advance(len(keys))

    async def _flush(self) -> None:
        if self.batch:
            await self._land(all_of_them=False)
            wanted = list(self.batch.values())
            task = asyncio.create_task(apply(self.c, self.caller, wanted))
            self.flying.append((task, set(self.batch)))
            self.batch.clear()


@asynccontextmanager
async def _member(
    c: Components, caller: Caller, robot: str, group: str | None
) -> AsyncIterator[None]:
    """The robot in `group` meanwhile (a group memory is written in its author's group),
    through the groups' service; then back in its own."""
    own = None
    if group is not None:
        async with unit_of_work(c, caller) as u:
            try:
                own = (await u.robots.get(robot)).group
            except NotFound:
                pass
    if group is None or own == group:
        yield
        return
    await _move(c, caller, robot, from_=own, to=group)
    try:
        yield
    finally:
        await _move(c, caller, robot, from_=group, to=own)


async def _move(
    c: Components, caller: Caller, robot: str, *, from_: str | None, to: str | None
) -> None:
    for name, join, leave in ((from_, [], [robot]), (to, [robot], [])):
        if name is not None:
            async with unit_of_work(c, caller) as u:
                await u.groups.change(name, join=join, leave=leave)
