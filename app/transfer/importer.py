"""`htm import`: a file written by `htm export`, into a namespace, through the services.

Two passes over the file, each a line at a time: the first checks every line (nothing is
written when one is bad), the second applies them in batches (app/transfer/sync.py), so a
key already in the file's state is skipped: importing a file again changes nothing, and an
import that stopped half way is resumed by running it again. Snapshots follow the memories,
each recreated through SnapshotService.adopt with the memories of its keys (one imported
before, same robot, name and time, is skipped)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.progress import Progress

from app.common import parse_json
from app.components import Components
from app.config import Settings
from app.db.vectors import stored_dimension
from app.errors import DomainError
from app.memories.limits import check_fields
from app.memories.schemas import MemoryCreate
from app.transfer.format import FORMAT_VERSION, Header, Record, SnapshotRecord
from app.transfer.sync import Counts, Wanted, apply
from app.unit import operator, unit_of_work

# Memories per batch (at most the deployment's max_batch_size), and batches applied at once:
# two keep two PostgreSQL backends busy, as the batch endpoint's clients do (bench/README.md
# has the rate beside a raw COPY).
BATCH = 500
IN_FLIGHT = 2


class BadFile(Exception):
    """A line of the file that cannot be imported, and why."""

    def __init__(self, path: Path, line: int, why: str) -> None:
        super().__init__(f"{path}:{line}: {why}")


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            if raw.strip():
                try:
                    yield n, parse_json(raw)  # as a request body: integers kept exactly
                except json.JSONDecodeError as exc:
                    raise BadFile(path, n, f"not JSON: {exc}") from None


def read_header(path: Path) -> Header:
    for n, value in _records(path):
        try:
            header = Header.model_validate(value)
        except ValidationError as exc:
            raise BadFile(path, n, f"not an htm export header: {_why(exc)}") from None
        if header.version > FORMAT_VERSION:
            raise BadFile(path, n, f"format version {header.version} is newer than this htm")
        return header
    raise BadFile(path, 1, "empty file")


def _why(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}" for e in exc.errors()[:3]
    )


def _lines(path: Path) -> Iterator[tuple[int, Record | SnapshotRecord]]:
    records = _records(path)
    next(records)  # the header
    for n, value in records:
        snapshot = isinstance(value, dict) and value.get("kind") == "snapshot"
        try:
            yield n, (SnapshotRecord if snapshot else Record).model_validate(value)
        except ValidationError as exc:
            raise BadFile(path, n, _why(exc)) from None


def _memories(path: Path) -> Iterator[tuple[int, Record]]:
    for n, r in _lines(path):
        if isinstance(r, Record):
            yield n, r


def check(path: Path, settings: Settings) -> int:
    """Every memory line as the API would check it; returns how many there are."""
    read_header(path)
    for _ in _lines(path):  # every line's shape, snapshots' too
        pass
    count = 0
    for n, r in _memories(path):
        try:
            check_fields(settings, MemoryCreate(**_fields(r)))
        except ValidationError as exc:
            raise BadFile(path, n, _why(exc)) from None
        except DomainError as exc:
            raise BadFile(path, n, exc.detail) from None
        count += 1
    return count


def _fields(r: Record) -> dict[str, Any]:
    return {
        "key": r.key,
        "content": r.content,
        "type": r.type,
        "importance": r.importance,
        "tags": r.tags,
        "metadata": r.metadata,
        "created_at": r.created_at,
        "valid_from": r.valid_from,
        "valid_to": r.valid_to,
    }


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
) -> tuple[str, Counts]:
    """Checks the file, then imports it; returns the namespace and what changed."""
    header = read_header(path)
    total = check(path, c.settings)
    namespace = namespace or header.namespace
    caller = await operator(c, namespace)
    async with c.sessionmaker() as session:
        dimension = await stored_dimension(session)
    model = c.embedder.model
    task = progress.add_task(f"import {namespace}", total=total) if progress else None
    counts = Counts()
    size = min(batch_size or BATCH, c.settings.max_batch_size)
    batch: dict[str, Wanted] = {}
    # Batches in flight, with their keys: a key repeated in the file waits until every batch
    # holding it is applied, so the file's lines still apply in order, key by key.
    flying: list[tuple[asyncio.Task[Counts], set[str]]] = []

    async def land(all_of_them: bool) -> None:
        nonlocal counts
        while flying and (all_of_them or len(flying) >= IN_FLIGHT):
            done, keys = flying.pop(0)
            counts += await done
            if progress is not None and task is not None:
                progress.advance(task, len(keys))

    async def flush() -> None:
        if batch:
            await land(all_of_them=False)
            wanted = list(batch.values())
            flying.append((asyncio.create_task(apply(c, caller, wanted)), set(batch)))
            batch.clear()

    try:
        for _, r in _memories(path):
            # A repeated key applies after every earlier line of it has.
            repeat = r.key in batch or any(r.key in keys for _, keys in flying)
            if repeat or len(batch) >= size:
                await flush()
            if repeat:
                await land(all_of_them=True)
            keep = reusable(r, model, dimension)
            batch[r.key] = Wanted(
                key=r.key,
                author=r.author,
                content=r.content,
                type=r.type,
                importance=r.importance,
                tags=r.tags,
                metadata=r.metadata,
                created_at=r.created_at,
                deleted=r.deleted_at is not None,
                embedding=r.embedding if keep else None,
                embedding_model=r.embedding_model if keep else None,
                valid_from=r.valid_from,
                valid_to=r.valid_to,
                visibility=r.visibility,
                readers=r.readers,
                pool=r.pool,
            )
        await flush()
        await land(all_of_them=True)
        for _, s in _lines(path):
            if isinstance(s, SnapshotRecord):
                async with unit_of_work(c, caller) as u:
                    added = await u.snapshots.adopt(
                        s.robot, s.name, s.created_at, s.items, s.readable
                    )
                counts.snapshots += added
    finally:  # an error (or Ctrl-C) leaves no batch running on its own
        for running, _ in flying:
            running.cancel()
    return namespace, counts
