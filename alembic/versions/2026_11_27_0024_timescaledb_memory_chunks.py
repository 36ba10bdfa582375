"""TimescaleDB, measured (issue 36): `memory` in chunks of ten years, i.e. one chunk, and
inserts counted per statement on the hypertables too. Without TimescaleDB (or where a table
is not a hypertable) this migration does nothing: schema.sql, on plain PostgreSQL, is
unchanged by it.

Chunk interval. Migration 0001 gave both hypertables HTM_HYPERTABLE_CHUNK_INTERVAL, 7 days by
default. On `memory` every chunk has its own HNSW (and GIN) index, and an unfiltered recall
searches every chunk's and merges them. Measured with 30,000 memories over a year
(bench/results/2026-11-27-timescaledb.md, TimescaleDB 2.29.2, PostgreSQL 18.4): with weekly
chunks (53) the planner read them all exactly, a vector recall's SQL at 75 ms against 14 ms
on a plain table; with 90-day chunks (5) it merged five HNSW scans, 25 ms, and a hybrid
recall 30 ms against 18; a one-week recall, which chunks let skip the others, took 14.0 ms
against 13.5 ms on the plain table, no gain. So `memory` is best one table: where its
interval is still 0001's default it becomes MEMORY_CHUNK_DAYS, longer than any deployment's
memories have spanned so far; an interval chosen on purpose (another
HTM_HYPERTABLE_CHUNK_INTERVAL) is kept. TimescaleDB applies a new interval to the chunks it
creates from then on: chunks that already hold rows keep theirs (TimescaleDB's
merge_chunks joins them, under an exclusive lock). `memory_event` (append-only, read by
time, compressed after 7 days: app/db/event_log.py) keeps HTM_HYPERTABLE_CHUNK_INTERVAL.

Counting. Migration 0014 counts a statement's inserted rows with one statement-level trigger
and a transition table, but left the hypertables on 0004's row triggers: transition tables
on a hypertable arrived in TimescaleDB 2.18, and 2.26.4 fixed two crashes with them after a
column drop (the CHANGELOG's #9615 and #9641). From TIMESCALEDB_STATEMENT_COUNTS on (the
installed version, read here), the hypertables get 0014's statement triggers, exactly as a
plain table has them. A TimescaleDB upgraded past that later keeps the row triggers (which
count the same numbers) until this migration runs again (downgrade to 0023, upgrade).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27
"""

import importlib.util
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from alembic import op
from sqlalchemy import text

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEMORY_CHUNK_DAYS = 3650
OLD_DEFAULT_DAYS = 7  # 0001's, from HTM_HYPERTABLE_CHUNK_INTERVAL's default
TIMESCALEDB_STATEMENT_COUNTS = (2, 26, 4)


def _timescaledb() -> tuple[int, ...] | None:
    """The installed TimescaleDB's version, or None without it."""
    found = (
        op.get_bind()
        .execute(text("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"))
        .scalar()
    )
    if found is None:
        return None
    return tuple(int(part) for part in found.split("-")[0].split(".") if part.isdigit())


def _interval(table: str) -> timedelta | None:
    """The time dimension's chunk interval of `table` where it is a hypertable, else None."""
    return (
        op.get_bind()
        .execute(
            text(
                "SELECT time_interval FROM timescaledb_information.dimensions"
                " WHERE hypertable_schema = current_schema() AND hypertable_name = :t"
                " AND dimension_number = 1"
            ),
            {"t": table},
        )
        .scalar()
    )


def _statement_counting() -> ModuleType:
    """Migration 0014's module: its statement triggers, and the way back to row triggers."""
    path = next(Path(__file__).parent.glob("*_0014_statement_counting.py"))
    spec = importlib.util.spec_from_file_location("htm_migration_0014", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _has_trigger(name: str) -> bool:
    found = op.get_bind().execute(text("SELECT 1 FROM pg_trigger WHERE tgname = :n"), {"n": name})
    return found.scalar() is not None


def upgrade() -> None:
    version = _timescaledb()
    if version is None:
        return
    if _interval("memory") == timedelta(days=OLD_DEFAULT_DAYS):
        _set_memory_chunk_days(MEMORY_CHUNK_DAYS)
    if version < TIMESCALEDB_STATEMENT_COUNTS:
        return
    counting = _statement_counting()
    if _interval("memory") is not None and not _has_trigger("memory_count_inserted"):
        counting.memory_statement_counts()
    if _interval("memory_event") is not None and not _has_trigger("robot_activity_inserted"):
        counting.event_statement_counts()


def _set_memory_chunk_days(days: int) -> None:
    op.execute(f"SELECT set_chunk_time_interval('memory', INTERVAL '{days} days')")


def downgrade() -> None:
    if _timescaledb() is None:
        return
    # Only what this migration changed: on the hypertables (0014 made the plain tables').
    counting = _statement_counting()
    if _interval("memory") is not None:
        counting.memory_row_counts()
        if _interval("memory") == timedelta(days=MEMORY_CHUNK_DAYS):
            _set_memory_chunk_days(OLD_DEFAULT_DAYS)
    if _interval("memory_event") is not None:
        counting.event_row_counts()
