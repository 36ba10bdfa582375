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
from collections.abc import AsyncIterator
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
    counts = await _memories(c, caller, path, plan, progress, batch_size)
    await kinds.finish_pools(c, caller, plan, done)
    await kinds.namespace_settings(c, caller, plan, done)
    await kinds.links(c, caller, plan, done)
    await kinds.snapshots(c, caller, path, done)
    return plan.namespace, counts, done


async def _memories(
    c: Components,
    caller: Caller,
    path: Path,
    plan: Plan,
    progress: Progress | None,
    batch_size: int | None,
) -> Counts:
    async with c.sessionmaker() as session:
        dimension = await stored_dimension(session)
    model = c.embedder.model
    task = progress.add_task(f"import {plan.namespace}", total=plan.memories) if progress else None
    counts = Counts()
    size = min(batch_size or BATCH, c.settings.max_batch_size)
    batch: dict[str, Wanted] = {}
    # Batches in flight, with their keys: a key repeated in the file waits until every batch
    # holding it is applied, so the file's lines still apply in order, key by key.
    flying: list[tuple[asyncio.Task[Counts], set[str]]] = []
    later: list[tuple[tuple[object, ...], Wanted, str | None]] = []  # written one at a time
    superseded = plan.superseded
    ends: dict[str, Wanted] = {}  # what a superseded memory ends as, once superseded

    def advance(n: int) -> None:
        if progress is not None and task is not None:
            progress.advance(task, n)

    async def land(all_of_them: bool) -> None:
        nonlocal counts
        while flying and (all_of_them or len(flying) >= IN_FLIGHT):
            done, keys = flying.pop(0)
            counts += await done
            advance(len(keys))

    async def flush() -> None:
        if batch:
            await land(all_of_them=False)
            wanted = list(batch.values())
            flying.append((asyncio.create_task(apply(c, caller, wanted)), set(batch)))
            batch.clear()

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
                continue
            # A repeated key applies after every earlier line of it has.
            repeat = r.key in batch or any(r.key in keys for _, keys in flying)
            if repeat or len(batch) >= size:
                await flush()
            if repeat:
                await land(all_of_them=True)
            batch[r.key] = w
        await flush()
        await land(all_of_them=True)
    finally:  # an error (or Ctrl-C) leaves no batch running on its own
        for running, _ in flying:
            running.cancel()
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
    await _move(c, caller, robot, own, group)
    try:
        yield
    finally:
        await _move(c, caller, robot, group, own)


async def _move(
    c: Components, caller: Caller, robot: str, from_: str | None, to: str | None
) -> None:
    for name, join, leave in ((from_, [], [robot]), (to, [robot], [])):
        if name is not None:
            async with unit_of_work(c, caller) as u:
                await u.groups.change(name, join=join, leave=leave)
