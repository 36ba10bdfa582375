"""Valid time beside transaction time, and supersede (issue 33).

- `memory.valid_from` / `valid_to`: when the fact is true. NULL `valid_from` means from the
  memory's `created_at`; NULL `valid_to` means open-ended. A memory is **current** at an
  instant T when `coalesce(valid_from, created_at) <= T` and `valid_to` is NULL or after T;
  recall, list and prompt read current memories by default (app/recall/query.py `validity`).
- `memory.superseded_by`: the id of the memory that replaced this one (`supersedes` on add);
  its `valid_to` is then the new memory's `valid_from`.
- `memory_version` keeps both columns, so a version read `as_of` an instant (transaction
  time) carries the validity believed then: both axes in one statement.
- `memory_event.kind` gains `supersede` (logged for the memory superseded).
- `memory_valid_to`: the ended memories of a namespace by when they ended; partial, so the
  current ones (nearly all) cost nothing to write. Retention's "superseded for N days" and a
  past `valid_at` read it. `memory_superseded_by`: a supersede chain walked back
  (`GET …/memories/{key}/history`), also partial.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory
            ADD COLUMN valid_from timestamptz,
            ADD COLUMN valid_to timestamptz,
            ADD COLUMN superseded_by bigint,
            ADD CONSTRAINT memory_validity_check
                CHECK (valid_to IS NULL OR valid_to > coalesce(valid_from, created_at))
                NOT VALID""")
    op.execute("ALTER TABLE memory VALIDATE CONSTRAINT memory_validity_check")
    op.execute("""
        ALTER TABLE memory_version
            ADD COLUMN valid_from timestamptz,
            ADD COLUMN valid_to timestamptz,
            ADD COLUMN superseded_by bigint""")
    op.execute(
        "CREATE INDEX memory_valid_to ON memory (namespace_id, valid_to) WHERE valid_to IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX memory_superseded_by ON memory (superseded_by) "
        "WHERE superseded_by IS NOT NULL"
    )
    _kinds(*KINDS, "supersede")
    # Statistics for the new columns (all NULL): without them the planner guesses that
    # "valid_to IS NULL" keeps 0.5 % of the rows, and recall's estimate of a namespace's
    # current memories (exact search or the index: app/recall/planner.py) would be far off
    # until the next autovacuum. A sample of two columns: seconds, whatever the table's size.
    op.execute("ANALYZE memory (valid_from, valid_to, superseded_by)")


KINDS = ("add", "recall", "evict", "forget", "restore", "access")


def _without_columnstore() -> None:
    """TimescaleDB refuses a constraint change on a hypertable whose columnstore
    (compression) is on: memory_event's chunks are decompressed and compression turned off;
    the next start of the service turns it on again (app/db/event_log.py)."""
    bind = op.get_bind()
    if not bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'")).scalar():
        return
    on = bind.execute(
        text(
            "SELECT compression_enabled FROM timescaledb_information.hypertables "
            "WHERE hypertable_schema = current_schema() AND hypertable_name = 'memory_event'"
        )
    ).scalar()
    if not on:
        return
    op.execute("SELECT remove_compression_policy('memory_event', if_exists => true)")
    op.execute("SELECT decompress_chunk(c, true) FROM show_chunks('memory_event') c")
    op.execute("ALTER TABLE memory_event SET (timescaledb.compress = false)")


def _kinds(*kinds: str) -> None:
    _without_columnstore()
    listed = ", ".join(f"'{k}'" for k in kinds)
    op.execute("ALTER TABLE memory_event DROP CONSTRAINT memory_event_kind_check")
    op.execute(
        f"ALTER TABLE memory_event ADD CONSTRAINT memory_event_kind_check "
        f"CHECK (kind IN ({listed})) NOT VALID"
    )
    op.execute("ALTER TABLE memory_event VALIDATE CONSTRAINT memory_event_kind_check")


def downgrade() -> None:
    op.execute("DELETE FROM memory_event WHERE kind = 'supersede'")
    _kinds(*KINDS)
    op.execute("DROP INDEX memory_superseded_by")
    op.execute("DROP INDEX memory_valid_to")
    op.execute(
        "ALTER TABLE memory_version DROP COLUMN valid_from, DROP COLUMN valid_to, "
        "DROP COLUMN superseded_by"
    )
    op.execute(
        "ALTER TABLE memory DROP CONSTRAINT memory_validity_check, DROP COLUMN valid_from, "
        "DROP COLUMN valid_to, DROP COLUMN superseded_by"
    )
