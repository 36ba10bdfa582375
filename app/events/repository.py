"""memory_event: the append-only activity log (add, recall, evict, forget, restore, access)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.sql import sql

EventKind = Literal["add", "recall", "evict", "forget", "restore", "access"]


class EventRepository:
    def __init__(self, session: AsyncSession, clock: Callable[[], datetime] | None = None) -> None:
        self.session = session
        # Events are stamped by the service clock (when given), the same clock that stats
        # use to pick "today", so activity per day is consistent and testable.
        self.clock = clock

    async def record(
        self,
        namespace_id: int,
        kind: EventKind,
        robot_id: int | None,
        memory_ids: Sequence[int | None],
        detail: dict[str, Any] | None = None,
    ) -> None:
        """One row per memory, in one statement."""
        if not memory_ids:
            return
        await self.session.execute(
            sql("""
            INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, detail, at)
            SELECT :ns, :robot, m, :kind, CAST(:detail AS jsonb),
                   coalesce(CAST(:at AS timestamptz), now())
            FROM unnest(CAST(:ids AS bigint[])) AS m"""),
            {
                "ns": namespace_id,
                "robot": robot_id,
                "kind": kind,
                "ids": list(memory_ids),
                "detail": json.dumps(detail or {}),
                "at": self.clock() if self.clock else None,
            },
        )
