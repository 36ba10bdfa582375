"""The event log (`memory_event`) where it is a TimescaleDB hypertable: its chunks older
than COMPRESS_AFTER compressed (by namespace, newest first within one), and with
HTM_EVENT_RETENTION_DAYS those older than that dropped. Only event rows: memories live in
`memory`, which no policy touches, and the statistics' daily counts live in their own tables
(migration 0004). TimescaleDB's own jobs do the work; each start sets the policies to the
settings (idempotent, one process at a time). Without TimescaleDB, nothing happens."""

from __future__ import annotations

import logging

from app.db.session import Sessionmaker
from app.db.sql import sql

log = logging.getLogger(__name__)

COMPRESS_AFTER_DAYS = 7
_LOCK = 0x68746D_6576  # "htm-ev": starts setting the policies one at a time


async def apply_event_log_policy(sessionmaker: Sessionmaker, retention_days: int | None) -> bool:
    """Whether memory_event is a hypertable (and so has the policies now)."""
    async with sessionmaker() as session:
        present = await session.execute(
            sql("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")
        )
        if present.scalar() is None:
            return False
        row = (
            await session.execute(
                sql("""
                SELECT compression_enabled FROM timescaledb_information.hypertables
                WHERE hypertable_schema = current_schema() AND hypertable_name = 'memory_event'""")
            )
        ).one_or_none()
        if row is None:
            return False
        await session.execute(sql("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
        if not row.compression_enabled:
            await session.execute(
                sql("""
                ALTER TABLE memory_event SET (
                    timescaledb.compress,
                    timescaledb.compress_segmentby = 'namespace_id',
                    timescaledb.compress_orderby = 'at DESC, id DESC')""")
            )
        await session.execute(
            sql("""
            SELECT add_compression_policy('memory_event', make_interval(days => :days),
                                          if_not_exists => true)"""),
            {"days": COMPRESS_AFTER_DAYS},
        )
        await session.execute(
            sql("SELECT remove_retention_policy('memory_event', if_exists => true)")
        )
        if retention_days is not None:
            await session.execute(
                sql("SELECT add_retention_policy('memory_event', make_interval(days => :days))"),
                {"days": retention_days},
            )
        await session.commit()
    return True
