"""The SQL of access counts (app/memories/access.py): one statement writes what a process
gathered since its last flush."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.db.session import DbSession
from app.db.sql import sql

_ADD = sql("""
    UPDATE memory m
    SET access_count = m.access_count + u.n,
        last_accessed_at = greatest(m.last_accessed_at, u.at)
    FROM (SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:ns AS int[]),
                               CAST(:ats AS timestamptz[])) AS u(id, n, at)
          ORDER BY id) AS u
    WHERE m.id = u.id""")


class AccessRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def add(self, ids: Sequence[int], counts: Sequence[int], ats: Sequence[datetime]) -> None:
        """Add counts[i] accesses to memory ids[i], last accessed at the latest of its own and
        ats[i]."""
        await self.session.execute(_ADD, {"ids": ids, "ns": counts, "ats": ats})
