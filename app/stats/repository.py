"""Statistics SQL. Activity per day uses TimescaleDB's time_bucket when memory_event is a
hypertable and date_trunc otherwise — detected from the catalog, never assumed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

# What one memory row holds for its namespace, as stored: pg_column_size is the on-disk size
# of each value (after compression; out-of-line TOAST values included). The namespace's own
# data only — never pg_database_size, which would show every namespace the whole database.
MEMORY_BYTES = (
    "coalesce(pg_column_size(content), 0) + coalesce(pg_column_size(metadata), 0)"
    " + coalesce(pg_column_size(tags), 0) + coalesce(pg_column_size(embedding), 0)"
)


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
        row = (
            await self.session.execute(
                sql("""
                SELECT count(*) AS memories,
                       min(created_at) AS oldest, max(created_at) AS newest,
                       count(*) FILTER (WHERE embedding_status = 'pending') AS pending,
                       count(*) FILTER (WHERE embedding_status = 'failed') AS failed
                FROM memory
                WHERE namespace_id = :ns AND author_robot_id = :robot AND deleted_at IS NULL"""),
                {"ns": namespace_id, "robot": robot_id},
            )
        ).one()
        by_type: dict[str, int] = dict(
            (
                await self.session.execute(
                    sql("""
                    SELECT type, count(*) FROM memory
                    WHERE namespace_id = :ns AND author_robot_id = :robot AND deleted_at IS NULL
                    GROUP BY type ORDER BY type"""),
                    {"ns": namespace_id, "robot": robot_id},
                )
            ).all()
        )
        return {**row._asdict(), "by_type": by_type}

    async def activity(
        self, robot_id: int, since: datetime, until: datetime, timescale: bool
    ) -> list[Any]:
        """Counts per UTC day in [since, until). date_trunc on a timestamptz follows the
        session's TimeZone, so the zone is named; time_bucket buckets in UTC already."""
        bucket = "time_bucket('1 day', at)" if timescale else "date_trunc('day', at, 'UTC')"
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {bucket} AS day,
                       count(*) FILTER (WHERE kind = 'add') AS adds,
                       count(*) FILTER (WHERE kind = 'recall') AS recalls,
                       count(*) FILTER (WHERE kind = 'evict') AS evictions
                FROM memory_event
                WHERE robot_id = :robot AND at >= :since AND at < :until
                GROUP BY 1 ORDER BY 1"""),
                {"robot": robot_id, "since": since, "until": until},
            )
        )

    async def membership_usage(self, robot_id: int) -> tuple[int, int]:
        row = (
            await self.session.execute(
                sql("""
                SELECT coalesce(sum(m.token_count), 0), count(*)
                FROM working_memory_item w
                JOIN memory m ON m.id = w.memory_id AND m.created_at = w.memory_created_at
                WHERE w.robot_id = :robot AND w.in_working_memory AND m.deleted_at IS NULL"""),
                {"robot": robot_id},
            )
        ).one()
        return int(row[0]), int(row[1])

    async def namespace(self, namespace_id: int) -> dict[str, Any]:
        row = (
            await self.session.execute(
                sql(f"""
                SELECT count(*) FILTER (WHERE deleted_at IS NULL) AS memories,
                       count(*) FILTER (WHERE deleted_at IS NOT NULL) AS deleted,
                       count(*) FILTER (WHERE embedding_status = 'pending'
                                        AND deleted_at IS NULL) AS pending_embeddings,
                       count(*) FILTER (WHERE embedding_status = 'failed'
                                        AND deleted_at IS NULL) AS failed_embeddings,
                       coalesce(sum({MEMORY_BYTES}), 0)::bigint AS memory_bytes
                FROM memory WHERE namespace_id = :ns"""),
                {"ns": namespace_id},
            )
        ).one()
        return row._asdict()
