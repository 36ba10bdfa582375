"""Inserts counted once per statement, not once per row (issue 16: bulk load at the floor).

Migration 0004's row triggers ran four statements for every memory a batch inserts (its
stored size read back, the robot's and the namespace's counter upserts, and the robot's
activity upsert for its `add` event): about a tenth of a 500-memory batch's INSERT in
PostgreSQL (bench/README.md, "Figures behind the code"). Here the INSERT side of each count
becomes one statement-level trigger with a transition table, which adds up the statement's
rows by counter key (one upsert per robot and type, per namespace, per robot and day) and
reads the stored sizes back in one join. UPDATE
and DELETE keep 0004's row triggers (they change one row, or a few, at a time), and so do
the counts' rules: what a statement-level insert adds is what the row triggers added for its
rows, number for number (tests/stats/test_stats_counts.py checks both against counting the
rows).

TimescaleDB: a hypertable takes statement triggers with transition tables only from release
2.18 on; where `memory` or `memory_event` is a hypertable its row trigger is left as it was
here (detected at migration time, from timescaledb_information.hypertables), and migration
0024 installs these same triggers there when the installed TimescaleDB is recent enough
(`memory_statement_counts`, `event_statement_counts`; `*_row_counts` undo them).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As in 0004: what one stored row holds for its namespace, read back from the table (the
# transition table's values are before TOAST compression).
_BYTES = (
    "coalesce(pg_column_size(m.content), 0) + coalesce(pg_column_size(m.metadata), 0)"
    " + coalesce(pg_column_size(m.tags), 0) + coalesce(pg_column_size(m.embedding), 0)"
)
_COUNTED_COLUMNS = (
    "id, created_at, namespace_id, author_robot_id, type, deleted_at, embedding_status, "
    "content, metadata, tags, embedding"
)


def _hypertable(name: str) -> bool:
    bind = op.get_bind()
    if not bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")).scalar():
        return False
    return bool(
        bind.execute(
            text(
                "SELECT 1 FROM timescaledb_information.hypertables WHERE hypertable_name = :t"
                " AND hypertable_schema = current_schema()"
            ),
            {"t": name},
        ).scalar()
    )


def upgrade() -> None:
    if not _hypertable("memory"):
        memory_statement_counts()
    if not _hypertable("memory_event"):
        event_statement_counts()


def memory_statement_counts() -> None:
    """memory's inserts counted by a statement trigger (also run by migration 0024)."""
    op.execute(f"""
            CREATE FUNCTION memory_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE
                s smallint;
            BEGIN
                IF NOT EXISTS (SELECT 1 FROM inserted) THEN
                    RETURN NULL;
                END IF;
                s := memory_count_slot();
                INSERT INTO robot_memory_count AS c
                    (namespace_id, robot_id, type, slot, memories, pending, failed)
                SELECT namespace_id, author_robot_id, type, s, count(*),
                       count(*) FILTER (WHERE embedding_status = 'pending'),
                       count(*) FILTER (WHERE embedding_status = 'failed')
                FROM inserted WHERE deleted_at IS NULL
                GROUP BY namespace_id, author_robot_id, type
                ON CONFLICT (namespace_id, robot_id, type, slot) DO UPDATE
                SET memories = c.memories + excluded.memories,
                    pending = c.pending + excluded.pending,
                    failed = c.failed + excluded.failed;
                INSERT INTO namespace_memory_count AS c
                    (namespace_id, slot, memories, deleted, pending, failed, bytes)
                SELECT i.namespace_id, s,
                       count(*) FILTER (WHERE i.deleted_at IS NULL),
                       count(*) FILTER (WHERE i.deleted_at IS NOT NULL),
                       count(*) FILTER (WHERE i.deleted_at IS NULL
                                        AND i.embedding_status = 'pending'),
                       count(*) FILTER (WHERE i.deleted_at IS NULL
                                        AND i.embedding_status = 'failed'),
                       coalesce(sum({_BYTES}), 0)
                FROM inserted i
                JOIN memory m ON m.id = i.id AND m.created_at = i.created_at
                GROUP BY i.namespace_id
                ON CONFLICT (namespace_id, slot) DO UPDATE
                SET memories = c.memories + excluded.memories,
                    deleted = c.deleted + excluded.deleted,
                    pending = c.pending + excluded.pending,
                    failed = c.failed + excluded.failed,
                    bytes = c.bytes + excluded.bytes;
                RETURN NULL;
            END $$""")
    op.execute("DROP TRIGGER memory_count_new ON memory")
    op.execute(f"""
            CREATE TRIGGER memory_count_new AFTER UPDATE OF {_COUNTED_COLUMNS}
                ON memory FOR EACH ROW EXECUTE FUNCTION memory_count_new()""")
    op.execute("""
            CREATE TRIGGER memory_count_inserted AFTER INSERT ON memory
                REFERENCING NEW TABLE AS inserted
                FOR EACH STATEMENT EXECUTE FUNCTION memory_count_inserted()""")


def event_statement_counts() -> None:
    """memory_event's inserts counted by a statement trigger (also run by migration 0024)."""
    op.execute("""
            CREATE FUNCTION robot_activity_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE
                s smallint;
            BEGIN
                IF NOT EXISTS (SELECT 1 FROM inserted WHERE robot_id IS NOT NULL) THEN
                    RETURN NULL;
                END IF;
                s := memory_count_slot();
                INSERT INTO robot_activity_day AS c
                    (robot_id, day, slot, adds, recalls, evictions, other)
                SELECT robot_id, (at AT TIME ZONE 'UTC')::date, s,
                       count(*) FILTER (WHERE kind = 'add'),
                       count(*) FILTER (WHERE kind = 'recall'),
                       count(*) FILTER (WHERE kind = 'evict'),
                       count(*) FILTER (WHERE kind NOT IN ('add', 'recall', 'evict'))
                FROM inserted WHERE robot_id IS NOT NULL
                GROUP BY robot_id, (at AT TIME ZONE 'UTC')::date
                ON CONFLICT (robot_id, day, slot) DO UPDATE
                SET adds = c.adds + excluded.adds,
                    recalls = c.recalls + excluded.recalls,
                    evictions = c.evictions + excluded.evictions,
                    other = c.other + excluded.other;
                RETURN NULL;
            END $$""")
    op.execute("DROP TRIGGER robot_activity_count ON memory_event")
    op.execute("""
            CREATE TRIGGER robot_activity_count AFTER UPDATE OR DELETE ON memory_event
                FOR EACH ROW EXECUTE FUNCTION robot_activity_count()""")
    op.execute("""
            CREATE TRIGGER robot_activity_inserted AFTER INSERT ON memory_event
                REFERENCING NEW TABLE AS inserted
                FOR EACH STATEMENT EXECUTE FUNCTION robot_activity_inserted()""")


def downgrade() -> None:
    memory_row_counts()
    event_row_counts()


def memory_row_counts() -> None:
    """Back to 0004's row trigger for memory's inserts, where the statement trigger is."""
    bind = op.get_bind()
    has = bind.execute(
        text("SELECT 1 FROM pg_trigger WHERE tgname = 'memory_count_inserted'")
    ).scalar()
    if has:
        op.execute("DROP TRIGGER memory_count_inserted ON memory")
        op.execute("DROP FUNCTION memory_count_inserted()")
        op.execute("DROP TRIGGER memory_count_new ON memory")
        op.execute(f"""
            CREATE TRIGGER memory_count_new AFTER INSERT OR UPDATE OF {_COUNTED_COLUMNS}
                ON memory FOR EACH ROW EXECUTE FUNCTION memory_count_new()""")


def event_row_counts() -> None:
    """Back to 0004's row trigger for memory_event's inserts, where the statement trigger is."""
    bind = op.get_bind()
    has = bind.execute(
        text("SELECT 1 FROM pg_trigger WHERE tgname = 'robot_activity_inserted'")
    ).scalar()
    if has:
        op.execute("DROP TRIGGER robot_activity_inserted ON memory_event")
        op.execute("DROP FUNCTION robot_activity_inserted()")
        op.execute("DROP TRIGGER robot_activity_count ON memory_event")
        op.execute("""
            CREATE TRIGGER robot_activity_count AFTER INSERT OR UPDATE OR DELETE ON memory_event
                FOR EACH ROW EXECUTE FUNCTION robot_activity_count()""")
