"""Working-memory membership in Postgres (invariant 7): the source for rebuilding Redis and
for serving context while Redis is down."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import RELAXED_FLUSH_CTE, sql


class MembershipRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def record(
        self,
        namespace_id: int,
        robot_id: int,
        seq: int,
        members: list[tuple[str, datetime, datetime, bool]],
        departed: list[str],
        *,
        durable: bool = True,
    ) -> list[int]:
        """Apply one Redis change: members (key, added_at, last_access_at, from_recall) are in,
        departed keys are out. Last writer wins by seq, so concurrent requests converge to the
        order Redis applied them in. Returns the memory ids of the departed keys.

        Like the place script, re-placing a present member keeps its added_at (its eviction
        slot) and never moves its last access backwards; otherwise a rebuild would reorder it.
        durable=False: the transaction changes nothing a client is told is stored, and its
        commit need not wait for the WAL flush (see app.db.sql.RELAXED_FLUSH_CTE).
        """
        keys = [m[0] for m in members] + departed
        if not keys:
            return []
        n = len(members)
        relaxed = f"WITH {RELAXED_FLUSH_CTE}" if not durable else ""
        rows = await self.session.execute(
            sql(f"""
            {relaxed}
            INSERT INTO working_memory_item AS w (robot_id, memory_id, memory_created_at,
                in_working_memory, seq, added_at, last_access_at, from_recall)
            SELECT :robot, k.memory_id, k.memory_created_at, t.in_wm, :seq,
                   coalesce(t.added_at, now()), coalesce(t.last_access, now()),
                   coalesce(t.from_recall, false)
            FROM unnest(CAST(:keys AS text[]), CAST(:in_wm AS boolean[]),
                        CAST(:added AS timestamptz[]), CAST(:access AS timestamptz[]),
                        CAST(:recall AS boolean[])) AS t(key, in_wm, added_at, last_access,
                                                         from_recall)
            JOIN memory_key k ON k.namespace_id = :ns AND k.key = t.key{
                " CROSS JOIN flush" if not durable else ""
            }
            ON CONFLICT (robot_id, memory_id) DO UPDATE SET
                in_working_memory = excluded.in_working_memory,
                seq = excluded.seq,
                added_at = CASE WHEN excluded.in_working_memory AND NOT w.in_working_memory
                                THEN excluded.added_at ELSE w.added_at END,
                last_access_at = CASE
                    WHEN NOT excluded.in_working_memory THEN w.last_access_at
                    WHEN w.in_working_memory
                        THEN greatest(w.last_access_at, excluded.last_access_at)
                    ELSE excluded.last_access_at END,
                from_recall = CASE WHEN excluded.in_working_memory
                                   THEN excluded.from_recall ELSE w.from_recall END
            WHERE w.seq < excluded.seq
            RETURNING memory_id, in_working_memory"""),
            {
                "ns": namespace_id,
                "robot": robot_id,
                "seq": seq,
                "keys": keys,
                "in_wm": [True] * n + [False] * len(departed),
                "added": [m[1] for m in members] + [None] * len(departed),
                "access": [m[2] for m in members] + [None] * len(departed),
                "recall": [m[3] for m in members] + [None] * len(departed),
            },
        )
        return [r.memory_id for r in rows if not r.in_working_memory]

    async def touch(self, robot_id: int, memory_id: int, at: datetime) -> None:
        await self.session.execute(
            sql("""
            UPDATE working_memory_item SET last_access_at = greatest(last_access_at, :at)
            WHERE robot_id = :robot AND memory_id = :id AND in_working_memory"""),
            {"robot": robot_id, "id": memory_id, "at": at},
        )

    async def holders(self, memory_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql("""
                SELECT r.id, r.name FROM working_memory_item w JOIN robot r ON r.id = w.robot_id
                WHERE w.memory_id = :id AND w.in_working_memory"""),
                {"id": memory_id},
            )
        )

    async def leave(self, memory_id: int, robot_ids: list[int] | None = None) -> None:
        """Mark a memory out of working memory (for the given robots, or everyone)."""
        await self.session.execute(
            sql("""
            UPDATE working_memory_item SET in_working_memory = false
            WHERE memory_id = :id AND in_working_memory
              AND (CAST(:robots AS bigint[]) IS NULL OR robot_id = ANY(:robots))"""),
            {"id": memory_id, "robots": robot_ids},
        )

    async def set_stale(self, robot_ids: list[int], stale: bool) -> None:
        await self.session.execute(
            sql("UPDATE robot SET working_memory_stale = :stale WHERE id = ANY(:ids)"),
            {"stale": stale, "ids": robot_ids},
        )

    async def clear(self, robot_id: int) -> None:
        await self.session.execute(
            sql("""
            UPDATE working_memory_item SET in_working_memory = false
            WHERE robot_id = :robot AND in_working_memory"""),
            {"robot": robot_id},
        )

    async def members(self, robot_id: int) -> list[Any]:
        """The robot's working set with what Redis needs, oldest first."""
        return list(
            await self.session.execute(
                sql("""
                SELECT m.id, m.key, m.content, m.token_count, m.importance,
                       w.added_at, w.last_access_at, w.from_recall
                FROM working_memory_item w
                JOIN memory m ON m.id = w.memory_id AND m.created_at = w.memory_created_at
                WHERE w.robot_id = :robot AND w.in_working_memory AND m.deleted_at IS NULL
                ORDER BY w.added_at, m.key"""),
                {"robot": robot_id},
            )
        )
