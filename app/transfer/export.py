"""`htm export`: a namespace (or one robot's memories) as JSON Lines (app/transfer/format.py),
read from one snapshot: the settings first, then the memories streamed page by page, so memory
use does not grow with the namespace, then the explicit links and the snapshots."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import IO, Any

import orjson
from rich.progress import Progress

from app.components import Components
from app.db.session import DbSession
from app.db.vectors import stored_dimension
from app.errors import NotFound
from app.groups.repository import GroupRepository
from app.maintenance.repository import MaintenanceRepository
from app.pools.repository import PoolRepository
from app.retention.repository import RetentionRepository
from app.robots.repository import RobotRepository
from app.snapshots.repository import SnapshotRepository
from app.transfer.format import SETTINGS_VERSION, SNAPSHOTS_VERSION, Header
from app.transfer.repository import TransferRepository
from app.working_memory.robots import group_name

PAGE = 500


def _feedback(f: Any) -> dict[str, Any] | None:
    """What feedback taught the memory (app/memories/learning.py); None: nothing."""
    if not f:
        return None
    return {
        "scale": f[0],
        "shift": f[1],
        "used": int(f[2]),
        "unused": int(f[3]),
        "pinned": int(f[4]),
        "forgotten_nearby": int(f[5]),
    }


def _record(row: Any) -> dict[str, Any]:
    out = {
        "key": row.key,
        "content": row.content,
        "type": row.type,
        "importance": row.importance,
        "confidence": row.confidence,
        "source": row.source,
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
        "access_count": row.access_count,
        "last_accessed_at": _iso(row.last_accessed_at),
        "feedback": _feedback(row.feedback),
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


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


async def _settings(session: DbSession, ns_id: int, robot: str | None) -> list[dict[str, Any]]:
    """The namespace's robots, groups, pools, retention policies and maintenance schedule, as
    the PUTs that set them would. One robot's export has its own settings, and the groups and
    pools its memories are in (its group's too), not the namespace's policies."""
    robots = await RobotRepository(session).list(ns_id)
    groups = await GroupRepository(session).list(ns_id)
    pools = await PoolRepository(session).in_namespace(ns_id)
    if robot is not None:
        robots = [r for r in robots if r.name == robot]
        robot_id = robots[0].id
        pooled, grouped = await TransferRepository(session).audiences(ns_id, robot_id)
        grouped += [r.g_name for r in robots if r.g_name]
        groups = [g for g in groups if g.name in grouped]
        pools = [p for p in pools if p.name in pooled]
    out = [*map(_robot, robots), *map(_group, groups), *map(_pool, pools)]
    if robot is None:
        policies = await RetentionRepository(session).policies(ns_id)
        if policies:
            out.append({"kind": "retention", "policies": [p.model_dump() for p in policies]})
        schedule = await MaintenanceRepository(session).schedule(ns_id)
        if schedule is not None:
            out.append({"kind": "maintenance", **schedule.model_dump()})
    return out


def _robot(r: Any) -> dict[str, Any]:
    return {
        "kind": "robot",
        "name": r.name,
        "working_memory_budget": r.working_memory_budget,  # null: the default
        "session_ttl_s": r.session_ttl_s,
        "summarize_evictions": r.summarize_evictions,
    }


def _group(g: Any) -> dict[str, Any]:
    return {
        "kind": "group",
        "name": group_name(g.name),
        "members": list(g.members),
        "working_memory_budget": g.working_memory_budget,
    }


def _pool(p: Any) -> dict[str, Any]:
    return {
        "kind": "pool",
        "name": p.name,
        "type": p.type,
        "readers": list(p.readers),
        "writers": list(p.writers),
        "public_read": p.public_read,
        "expires_at": _iso(p.expires_at),
        "archived_at": _iso(p.archived_at),
    }


def _version(settings: bool, snapshots: bool) -> int:
    """The lowest format version that holds the file (an older htm reads what it can)."""
    if settings:
        return SETTINGS_VERSION
    return SNAPSHOTS_VERSION if snapshots else 1


async def lines(
    c: Components,
    namespace: str,
    robot: str | None,
    *,
    embeddings: bool,
    progress: Progress | None = None,
) -> AsyncIterator[tuple[bool, bytes]]:
    """The header, the settings, each memory, oldest first (deleted ones too, with their
    deleted_at), the explicit links, then each snapshot of working memory; each line with
    whether it is a memory's."""
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
        settings = await _settings(session, ns_id, robot)
        links = await repo.explicit_links(ns_id, robot_id)
        snapshots = await SnapshotRepository(session).of_namespace(ns_id, robot_id)
        header = Header(
            format="htm-export",
            version=_version(bool(settings or links), bool(snapshots)),
            namespace=namespace,
            robot=robot,
            model=c.embedder.model,
            dimension=await stored_dimension(session),
            embeddings=embeddings,
            exported_at=c.clock(),
        )
        yield False, orjson.dumps(header.model_dump(mode="json")) + b"\n"
        for setting in settings:
            yield False, orjson.dumps(setting) + b"\n"
        title = f"export {namespace}"
        async for memory in _memories(
            repo, ns_id, robot_id, embeddings=embeddings, progress=progress, title=title
        ):
            yield True, memory
        for link in links:
            line = {"kind": "link", "source": link.source, "target": link.target,
                    "type": link.type, "weight": link.weight}  # fmt: skip
            yield False, orjson.dumps(line) + b"\n"
        for s in snapshots:
            yield False, orjson.dumps(_snapshot(s)) + b"\n"


async def _memories(
    repo: TransferRepository,
    ns_id: int,
    robot_id: int | None,
    *,
    embeddings: bool,
    progress: Progress | None,
    title: str,
) -> AsyncIterator[bytes]:
    """The memories' lines in keyset pages, oldest first (a task named `title` on
    `progress` counting them)."""
    task = None
    if progress is not None:
        task = progress.add_task(title, total=await repo.count(ns_id, robot_id))
    after: tuple[datetime, int] | None = None
    while True:
        rows = await repo.page(ns_id, robot_id, after, limit=PAGE, vectors=embeddings)
        for row in rows:
            yield orjson.dumps(_record(row)) + b"\n"
        if progress is not None and task is not None:
            progress.advance(task, len(rows))
        if len(rows) < PAGE:
            break
        after = (rows[-1].created_at, rows[-1].id)


async def export(
    c: Components,
    out: IO[bytes],
    namespace: str,
    *,
    robot: str | None,
    embeddings: bool,
    progress: Progress | None = None,
) -> int:
    """Writes the file; returns how many memories it holds."""
    n = 0
    async for memory, line in lines(c, namespace, robot, embeddings=embeddings, progress=progress):
        out.write(line)
        n += memory
    return n
