"""memory_event: the append-only activity log (add, recall, evict, forget, restore, access)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from app.db.session import DbSession
from app.db.sql import RELAXED_FLUSH_CTE, sql

EventKind = Literal["add", "recall", "evict", "forget", "restore", "access", "supersede"]


class EventRepository:
    def __init__(self, session: DbSession, clock: Callable[[], datetime] | None = None) -> None:
        self.session = session
        # Events are stamped by the service clock (when given), the same clock that stats
        # use to pick "today", so activity per day is consistent and testable.
        self.clock = clock

    async def record(
        self,
        namespace_id: int,
        kind: EventKind,
        robot_id: int | None,
        *,
        memory_ids: Sequence[int | None],
        detail: dict[str, Any] | None = None,
        wait_for_flush: bool = True,
    ) -> None:
        """One row per memory, in one statement. wait_for_flush=False: the transaction records only
        what was read or mirrored, and its commit need not wait for the WAL flush (see
        app.db.sql.RELAXED_FLUSH_CTE)."""
        if not memory_ids:
            return
        relaxed = f"WITH {RELAXED_FLUSH_CTE}" if not wait_for_flush else ""
        await self.session.execute(
            sql(f"""
            {relaxed}
            INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, detail, at)
            SELECT :ns, :robot, m, :kind, CAST(:detail AS jsonb),
                   coalesce(CAST(:at AS timestamptz), now())
            FROM unnest(CAST(:ids AS bigint[])) AS m{", flush" if not wait_for_flush else ""}"""),
            {
                "ns": namespace_id,
                "robot": robot_id,
                "kind": kind,
                "ids": list(memory_ids),
                "detail": json.dumps(detail or {}),
                "at": self.clock() if self.clock else None,
            },
        )
