"""`htm export`: a namespace (or one robot's memories) as JSON Lines, streamed page by page
from one snapshot, so memory use does not grow with the namespace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import IO, Any

import orjson
from rich.progress import Progress

from app.components import Components
from app.db.vectors import stored_dimension
from app.errors import NotFound
from app.snapshots.repository import SnapshotRepository
from app.transfer.format import FORMAT_VERSION, Header
from app.transfer.repository import TransferRepository
from app.working_memory.robots import group_name

PAGE = 500


def _record(row: Any) -> dict[str, Any]:
    out = {
        "key": row.key,
        "content": row.content,
        "type": row.type,
        "importance": row.importance,
        "tags": list(row.tags),
        "metadata": row.metadata,
        "author": row.author,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "version": row.version,
        "deleted_at": row.deleted_at.isoformat() if row.deleted_at else None,
        "embedding_status": row.embedding_status,
        "embedding_model": row.embedding_model,
        "valid_from": row.valid_from.isoformat() if row.valid_from else None,
        "valid_to": row.valid_to.isoformat() if row.valid_to else None,
        "superseded_by": row.superseded_by,
        "archived": row.archived,
        "visibility": row.visibility,
        "readers": list(row.readers),
        "pool": row.pool,
        "group": group_name(row.group_row) if row.group_row else None,
    }
    if row.embedding is not None:
        out["embedding"] = orjson.loads(row.embedding)  # pgvector's text form is a JSON list
    return out


def _snapshot(row: Any) -> dict[str, Any]:
    return {
        "kind": "snapshot",
        "robot": row.robot,
        "name": row.name,
        "created_at": row.created_at.isoformat(),
        "items": orjson.loads(row.entries) if isinstance(row.entries, str) else row.entries,
        "readable": list(row.readable),
    }


async def lines(
    c: Components,
    namespace: str,
    robot: str | None,
    embeddings: bool,
    progress: Progress | None = None,
) -> AsyncIterator[bytes]:
    """The header, then each memory, oldest first (deleted ones too, with their deleted_at),
    then each snapshot of working memory."""
    async with c.sessionmaker() as session, session.begin():
        repo = TransferRepository(session)
        await repo.snapshot()
        ns_id = await repo.namespace_id(namespace)
        if ns_id is None:
            raise NotFound(f"namespace {namespace!r} does not exist")
        robot_id = None
        if robot is not None:
            robot_id = await repo.robot_id(ns_id, robot)
            if robot_id is None:
                raise NotFound(f"robot {robot!r} does not exist in namespace {namespace!r}")
        snapshots = await SnapshotRepository(session).of_namespace(ns_id, robot_id)
        header = Header(
            format="htm-export",
            version=FORMAT_VERSION if snapshots else 1,
            namespace=namespace,
            robot=robot,
            model=c.embedder.model,
            dimension=await stored_dimension(session),
            embeddings=embeddings,
            exported_at=c.clock(),
        )
        yield orjson.dumps(header.model_dump(mode="json")) + b"\n"
        task = None
        if progress is not None:
            total = await repo.count(ns_id, robot_id)
            task = progress.add_task(f"export {namespace}", total=total)
        after: tuple[datetime, int] | None = None
        while True:
            rows = await repo.page(ns_id, robot_id, after, PAGE, embeddings)
            for row in rows:
                yield orjson.dumps(_record(row)) + b"\n"
            if task is not None:
                progress.advance(task, len(rows))  # type: ignore[union-attr]
            if len(rows) < PAGE:
                break
            after = (rows[-1].created_at, rows[-1].id)
        for s in snapshots:
            yield orjson.dumps(_snapshot(s)) + b"\n"


async def export(
    c: Components,
    out: IO[bytes],
    namespace: str,
    robot: str | None,
    embeddings: bool,
    progress: Progress | None = None,
) -> int:
    """Writes the file; returns how many memories it holds."""
    n = -1
    async for line in lines(c, namespace, robot, embeddings, progress):
        out.write(line)
        n += not line.startswith(b'{"kind":"snapshot"')
    return n
