"""Statistics SQL, answered from counters: robot_memory_count, namespace_memory_count and
robot_activity_day, kept by triggers in the transaction of every write (migration 0004), each
key summed over its stripes. So a robot's or a namespace's statistics read a few rows however
many memories and events there are, and equal what counting the memories and events gives
(tests/stats/test_stats_counts.py counts them the old way, beside)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader

# A memory's bytes as the counters add them up (migration 0004's trigger).
_BYTES = (
    "coalesce(pg_column_size(m.content), 0) + coalesce(pg_column_size(m.metadata), 0)"
    " + coalesce(pg_column_size(m.tags), 0) + coalesce(pg_column_size(m.embedding), 0)"
)
# The memories of the namespace a reader may not read, as namespace()'s figures: only
# restricted ones can be (a namespace-wide memory is every robot's), found through their
# indexes (memory_restricted, memory_pool), so the figures stay a few rows' work when few are.
_UNREADABLE = f"""
    SELECT count(*) FILTER (WHERE m.deleted_at IS NULL) AS memories,
           count(*) FILTER (WHERE m.deleted_at IS NOT NULL) AS deleted,
           count(*) FILTER (WHERE m.deleted_at IS NULL
                            AND m.embedding_status = 'pending') AS pending_embeddings,
           count(*) FILTER (WHERE m.deleted_at IS NULL
                            AND m.embedding_status = 'failed') AS failed_embeddings,
           coalesce(sum({_BYTES}), 0)::bigint AS memory_bytes
    FROM (
        SELECT * FROM memory m
        WHERE m.namespace_id = :ns AND m.visibility IN ('private', 'group')
        UNION ALL
        SELECT * FROM memory m
        WHERE m.pool_id IN (SELECT id FROM pool WHERE namespace_id = :ns)
          AND m.namespace_id = :ns AND m.visibility = 'pool'
    ) m
    WHERE ({{readable}}) IS NOT TRUE"""


class StatsRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def hypertables(self) -> list[str]:
        has_ext = (
            await self.session.execute(
                sql("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb')")
            )
        ).scalar_one()
        if not has_ext:
            return []
        return list(
            (
                await self.session.execute(
                    sql("""SELECT hypertable_name FROM timescaledb_information.hypertables
                            ORDER BY hypertable_name""")
                )
            ).scalars()
        )

    async def long_term(self, namespace_id: int, robot_id: int) -> dict[str, Any]:
        """The robot's memories not deleted: in all, by type, pending and failed embeddings
        (counters), and the oldest and newest created_at (the ends of the robot's
        (author_robot_id, created_at) index, read only when there is a memory)."""
        rows = (
            await self.session.execute(
                sql("""
                SELECT type, sum(memories)::bigint AS memories, sum(pending)::bigint AS pending,
                       sum(failed)::bigint AS failed
                FROM robot_memory_count
                WHERE namespace_id = :ns AND robot_id = :robot
                GROUP BY type HAVING sum(memories) > 0 ORDER BY type"""),
                {"ns": namespace_id, "robot": robot_id},
            )
        ).all()
        oldest = newest = None
        if rows:
            own = """FROM memory
                WHERE namespace_id = :ns AND author_robot_id = :robot AND deleted_at IS NULL"""
            oldest, newest = (
                await self.session.execute(
                    sql(f"""
                    SELECT (SELECT created_at {own} ORDER BY created_at LIMIT 1),
                           (SELECT created_at {own} ORDER BY created_at DESC LIMIT 1)"""),
                    {"ns": namespace_id, "robot": robot_id},
                )
            ).one()
        return {
            "memories": sum(r.memories for r in rows),
            "oldest": oldest,
            "newest": newest,
            "pending": sum(r.pending for r in rows),
            "failed": sum(r.failed for r in rows),
            "by_type": {r.type: r.memories for r in rows},
        }

    async def activity(
        self, robot_id: int, since: datetime, until: datetime, timescale: bool
    ) -> list[Any]:
        """Counts per UTC day in [since, until), both UTC midnights (the counters count whole
        days). A day with events of other kinds only is there, with zeros, as counting the
        events gives it. `timescale` no longer matters: the days are the counters' own."""
        return list(
            await self.session.execute(
                sql("""
                SELECT CAST(day AS timestamp) AT TIME ZONE 'UTC' AS day,
                       sum(adds)::bigint AS adds, sum(recalls)::bigint AS recalls,
                       sum(evictions)::bigint AS evictions
                FROM robot_activity_day
                WHERE robot_id = :robot AND day >= :since AND day < :until
                GROUP BY day HAVING sum(adds + recalls + evictions + other) > 0
                ORDER BY day"""),
                {
                    "robot": robot_id,
                    "since": since.astimezone(UTC).date(),
                    "until": until.astimezone(UTC).date(),
                },
            )
        )

    async def membership_usage(self, namespace_id: int, robot_id: int) -> tuple[int, int]:
        row = (
            await self.session.execute(
                sql("""
                SELECT coalesce(sum(m.token_count), 0), count(*)
                FROM working_memory_item w
                JOIN memory m ON m.namespace_id = :ns AND m.id = w.memory_id
                                 AND m.created_at = w.memory_created_at
                WHERE w.namespace_id = :ns AND w.robot_id = :robot AND w.in_working_memory
                  AND m.deleted_at IS NULL"""),
                {"ns": namespace_id, "robot": robot_id},
            )
        ).one()
        return int(row[0]), int(row[1])

    async def unreadable(self, namespace_id: int, reader: Reader) -> dict[str, Any]:
        """namespace()'s figures over the memories `reader` may not read."""
        readable, params = reader.where()
        row = (
            await self.session.execute(
                sql(_UNREADABLE.replace("{readable}", readable)), {"ns": namespace_id, **params}
            )
        ).one()
        return row._asdict()

    async def namespace(self, namespace_id: int) -> dict[str, Any]:
        row = (
            await self.session.execute(
                sql("""
                SELECT coalesce(sum(memories), 0)::bigint AS memories,
                       coalesce(sum(deleted), 0)::bigint AS deleted,
                       coalesce(sum(pending), 0)::bigint AS pending_embeddings,
                       coalesce(sum(failed), 0)::bigint AS failed_embeddings,
                       coalesce(sum(bytes), 0)::bigint AS memory_bytes
                FROM namespace_memory_count WHERE namespace_id = :ns"""),
                {"ns": namespace_id},
            )
        ).one()
        return row._asdict()
