"""The SQL of access counts (app/memories/access.py): one statement per table writes what a
process gathered since its last flush (memories; the session messages prompts took)."""

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


_ADD_MESSAGES = sql("""
    UPDATE session_message m SET access_count = m.access_count + u.n
    FROM (SELECT * FROM unnest(CAST(:sids AS bigint[]), CAST(:seqs AS bigint[]),
                               CAST(:ns AS int[])) AS u(sid, seq, n)
          ORDER BY sid, seq) AS u
    WHERE m.session_id = u.sid AND m.seq = u.seq""")


class AccessRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def add(self, ids: Sequence[int], counts: Sequence[int], ats: Sequence[datetime]) -> None:
        """Add counts[i] accesses to memory ids[i], last accessed at the latest of its own and
        ats[i]."""
        await self.session.execute(_ADD, {"ids": ids, "ns": counts, "ats": ats})

    async def add_messages(
        self, session_ids: Sequence[int], seqs: Sequence[int], counts: Sequence[int]
    ) -> None:
        """Add counts[i] accesses to message seqs[i] of session session_ids[i] (rows locked in
        key order, as the memories' are)."""
        await self.session.execute(_ADD_MESSAGES, {"sids": session_ids, "seqs": seqs, "ns": counts})
