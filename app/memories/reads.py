"""Reading memories: retrieve (now or as of an instant), list, and a memory's versions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.common import Page, decode_cursor, encode_cursor
from app.db.session import DbSession
from app.entities.repository import EntityRepository
from app.entities.service import entity_key
from app.errors import NotFound, Unprocessable
from app.events.repository import EventRepository
from app.memories.access import AccessTracker
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.learning import rate_of
from app.memories.model import ListFilters
from app.memories.repository import MemoryRepository
from app.memories.schemas import (
    FeedbackAccepted,
    MemoryFeedback,
    MemoryHistory,
    MemoryRead,
    MemoryVersionRead,
    MemoryVersions,
    SupersedeLink,
    to_read,
)
from app.memories.supersede_repository import SupersedeRepository
from app.memories.version_repository import VersionRepository
from app.robots.service import RobotService
from app.timeframes.resolve import resolve_timeframe
from app.timeframes.validity import validity_for
from app.visibility import Reader
from app.working_memory.protocol import WriteProtocol


class MemoryReader:
    def __init__(
        self,
        *,
        session: DbSession,
        reads: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        clock: Clock,
        access: AccessTracker,
    ) -> None:
        self.access = access
        self.session = session
        # list and a retrieve that touches nothing read here (a replica's session or the
        # primary's: app/db/replicas.py); what touches or writes reads the primary.
        self.reads = reads
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.clock = clock
        self.history = VersionRepository(session)
        self.events = EventRepository(session, clock)

    async def _get(
        self, robot_name: str, key: str, include_deleted: bool, session: DbSession | None = None
    ) -> Any:
        """The memory of `key`, if `robot_name` may read it; a key merged into another memory
        (`htm dedupe`) resolves to that memory, unless the merged one itself is asked for
        (`include_deleted`). Read in `session` (default: the primary's)."""
        session = session or self.session
        reader = Reader(self.caller.namespace_id, robot_name)
        row = await MemoryRepository(session).get(self.caller.namespace_id, key, reader=reader)
        if row is not None and row.deleted_at is not None and not include_deleted:
            survivor = await DuplicateRepository(session).survivor(row.id, reader)
            if survivor is not None:
                return survivor
        if row is None or (row.deleted_at is not None and not include_deleted):
            raise NotFound(f"memory {key!r} does not exist")
        return row

    async def retrieve(
        self, robot_name: str, key: str, include_deleted: bool, as_of: datetime | None = None
    ) -> MemoryRead:
        """The memory; for a writer, the access is also recorded (a reader's GET writes
        nothing: no robot registered, no event, no working-memory touch). With `as_of`, the
        version current at that instant, and no access recorded: working memory only ever
        holds the current version."""
        touches = as_of is None and self.caller.role != "reader"
        row = await self._get(robot_name, key, include_deleted, None if touches else self.reads)
        if as_of is not None:
            version = await VersionRepository(self.reads).at(row.id, row.created_at, as_of)
            if version is None:
                raise NotFound(f"memory {key!r} had no version yet at {as_of.isoformat()}")
            if version.current:
                return to_read(row)
            return to_read(row).model_copy(
                update={
                    **_version_fields(version),
                    "updated_at": version.changed_at,
                    "superseded_by": row.superseded_by if version.superseded_by else None,
                }
            )
        if self.caller.role == "reader":
            return to_read(row)
        robot = await self.robots.ensure(robot_name)
        # A read: its log row (and the touch) need not wait for the WAL flush.
        await self.events.record(
            self.caller.namespace_id, "access", robot.id, memory_ids=[row.id], wait_for_flush=False
        )
        if row.deleted_at is None:
            await self.two_tier.touch(robot, row.id, row.key)
            self.access.record([row.id], self.clock())
        return to_read(row)

    async def ids_of(self, keys: Sequence[str]) -> dict[str, int]:
        """The memory ids of these keys in the caller's namespace (keys it was shown)."""
        return await MemoryRepository(self.session).ids_of(self.caller.namespace_id, keys)

    async def keys_of(self, robot_name: str, ids: Sequence[int]) -> dict[int, str]:
        """The keys of the memories of these ids that the robot may read."""
        reader = Reader(self.caller.namespace_id, robot_name)
        return await MemoryRepository(self.session).keys_of(self.caller.namespace_id, ids, reader)

    async def feedback(self, robot_name: str, key: str, body: MemoryFeedback) -> FeedbackAccepted:
        """Feedback on whether a memory the robot may read was of use: its learned importance
        moves by the rule of app/memories/learning.py when the access-count flush writes it
        (about once a second; nothing is written on the request's path)."""
        row = await self._get(robot_name, key, include_deleted=False)
        self.access.record_feedback(row.id, body.kind)
        rate = self.access.learning_rate
        return FeedbackAccepted(
            key=row.key,
            used=body.used,
            pinned=body.kind == "pinned",
            step=rate_of(body.kind, rate),
            learning_rate=rate,
        )

    async def list(
        self,
        robot_name: str,
        scope: str,
        filters: ListFilters,
        *,
        timeframe: str | None,
        limit: int,
        cursor: str | None,
        valid_at: str | None = None,
        include: Sequence[str] = (),
        entity: str | None = None,
    ) -> Page[MemoryRead]:
        """One page, newest first; `cursor` is the previous page's next_cursor. Current
        memories (valid now) unless `valid_at` or `include=superseded`. `entity`: only the
        memories naming it or one of its aliases (app/entities)."""
        now = self.clock()
        if entity is not None:
            if filters.as_of is not None:
                message = "`entity` reads the current versions: give it without `as_of`"
                raise Unprocessable(message, errors=[{"field": "as_of", "message": message}])
            names = await EntityRepository(self.reads).names(
                self.caller.namespace_id, [entity_key(entity)]
            )
            filters = dataclasses.replace(filters, entity_names=tuple(names))
        tr = resolve_timeframe(timeframe, now)
        if tr is not None:
            filters = dataclasses.replace(filters, start=tr.start, end=tr.end)
        filters = dataclasses.replace(filters, valid=validity_for(valid_at, include, now))
        if scope == "self":
            robot = await self.robots.require(robot_name)
            filters = dataclasses.replace(filters, author_robot_id=robot.id)
        reader = Reader(self.caller.namespace_id, robot_name)
        filters = dataclasses.replace(filters, reader=reader)
        after = decode_cursor(cursor) if cursor else None
        rows = await MemoryRepository(self.reads).list(
            self.caller.namespace_id, filters, limit + 1, after
        )
        items = [to_read(r) for r in rows[:limit]]
        more = len(rows) > limit
        next_cursor = encode_cursor(items[-1].created_at, items[-1].id) if more else None
        return Page[MemoryRead](items=items, next_cursor=next_cursor)

    async def chain(self, robot_name: str, key: str, limit: int) -> MemoryHistory:
        """The supersede chain `key` is part of, oldest first (app/memories/supersede.py),
        as far as `robot_name` may read it."""
        row = await self._get(robot_name, key, include_deleted=True)
        rows = await SupersedeRepository(self.session).chain(
            self.caller.namespace_id, row.id, limit, Reader(self.caller.namespace_id, robot_name)
        )
        return MemoryHistory(
            key=row.key,
            chain=[SupersedeLink(**to_read(r).model_dump(), depth=r.depth) for r in rows],
        )

    async def versions(
        self, robot_name: str, key: str, include_deleted: bool, *, limit: int, before: int | None
    ) -> MemoryVersions:
        """Newest first, the current version included; `before`: only older versions."""
        row = await self._get(robot_name, key, include_deleted)
        rows = await self.history.history(row.id, row.created_at, limit, before)
        return MemoryVersions(
            key=row.key,
            versions=[
                MemoryVersionRead(
                    **_version_fields(v),
                    changed_by=v.changed_by,
                    changed_at=v.changed_at,
                    current=v.current,
                )
                for v in rows
            ],
        )


def _version_fields(v: Any) -> dict[str, Any]:
    """A version's own fields, as MemoryRead names them."""
    return {
        "version": v.version,
        "content": v.content,
        "type": v.type,
        "importance": v.importance,
        "confidence": v.confidence,
        "source": v.source,
        "tags": list(v.tags),
        "metadata": v.metadata,
        "created_at": v.created_at,
        "token_count": v.token_count,
        "embedding_status": v.embedding_status,
        "embedding_model": v.embedding_model,
        "valid_from": v.valid_from or v.created_at,
        "valid_to": v.valid_to,
    }
