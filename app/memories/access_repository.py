"""The SQL of access counts (app/memories/access.py): one statement per table writes what a
process gathered since its last flush (memories; the session messages prompts took).

A memory's counts live in memory_access (migration 0025), not in its wide `memory` row: an
update there wrote a new row version with an entry in each of memory's indexes (HNSW too),
as a full page left no room for a heap-only one. A memory_access row is narrow, its page
keeps room for the next version, and no index holds the counts: its updates are HOT."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.db.session import DbSession
from app.db.sql import sql
from app.memories.learning import Steps

# A memory hard-deleted since its access was counted has no key any more: skipped.
_ADD = sql("""
    INSERT INTO memory_access AS a (memory_id, access_count, last_accessed_at)
    SELECT u.id, u.n, u.at
    FROM unnest(CAST(:ids AS bigint[]), CAST(:ns AS int[]),
                CAST(:ats AS timestamptz[])) AS u(id, n, at)
    WHERE EXISTS (SELECT 1 FROM memory_key k WHERE k.memory_id = u.id)
    ORDER BY u.id
    ON CONFLICT (memory_id) DO UPDATE
    SET access_count = a.access_count + excluded.access_count,
        last_accessed_at = greatest(a.last_accessed_at, excluded.last_accessed_at)""")


# Feedback steps (app/memories/learning.py) composed after the stored ones: the stored map
# ℓ ↦ scale·ℓ + shift followed by the new one ℓ ↦ s·ℓ + t is ℓ ↦ s·scale·ℓ + (s·shift + t).
_LEARN = sql("""
    INSERT INTO memory_access AS a (memory_id, access_count, learn_scale, learn_shift, uses,
                                    misses, pins, nearby_forgets)
    SELECT u.id, 0, u.scale, u.shift, u.used, u.unused, u.pinned, u.nearby
    FROM unnest(CAST(:ids AS bigint[]), CAST(:scales AS float8[]), CAST(:shifts AS float8[]),
                CAST(:used AS int[]), CAST(:unused AS int[]), CAST(:pinned AS int[]),
                CAST(:nearby AS int[])) AS u(id, scale, shift, used, unused, pinned, nearby)
    WHERE EXISTS (SELECT 1 FROM memory_key k WHERE k.memory_id = u.id)
    ORDER BY u.id
    ON CONFLICT (memory_id) DO UPDATE
    SET learn_scale = excluded.learn_scale * a.learn_scale,
        learn_shift = excluded.learn_scale * a.learn_shift + excluded.learn_shift,
        uses = a.uses + excluded.uses,
        misses = a.misses + excluded.misses,
        pins = a.pins + excluded.pins,
        nearby_forgets = a.nearby_forgets + excluded.nearby_forgets""")


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

    async def learn(self, ids: Sequence[int], steps: Sequence[Steps]) -> None:
        """Compose steps[i], memory ids[i]'s feedback since the last flush, after its stored
        steps."""
        await self.session.execute(
            _LEARN,
            {
                "ids": ids,
                "scales": [s.scale for s in steps],
                "shifts": [s.shift for s in steps],
                "used": [s.used for s in steps],
                "unused": [s.unused for s in steps],
                "pinned": [s.pinned for s in steps],
                "nearby": [s.forgotten_nearby for s in steps],
            },
        )

    async def add_messages(
        self, session_ids: Sequence[int], seqs: Sequence[int], counts: Sequence[int]
    ) -> None:
        """Add counts[i] accesses to message seqs[i] of session session_ids[i] (rows locked in
        key order, as the memories' are)."""
        await self.session.execute(_ADD_MESSAGES, {"sids": session_ids, "seqs": seqs, "ns": counts})
