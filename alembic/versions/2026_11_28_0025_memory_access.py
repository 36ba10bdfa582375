"""Access counts in a narrow table of their own (issue 43).

memory.access_count and memory.last_accessed_at (0011) were written by the access-count
flush (app/memories/access.py) about once a second for every memory recalled or read. No
index of `memory` holds them, but a wide memory row (its content, vector and tsvector) on a
full page left no room for a heap-only (HOT) update: nearly every update wrote a new row
version elsewhere, and with it a new entry in each of memory's fifteen indexes, the HNSW
graph's included. Measured at 100,000 memories (bench/results/2026-11-28-access-counts.md,
a loaded 2-core machine): a flush of 300 rows took 946 ms (median), 1-4 % of its updates HOT.

memory_access holds them now, a row per memory accessed at least once (inserted by the
flush's upsert on its first access), 52 bytes with its line pointer. Fillfactor 50 leaves
room on each page for a new version of every row on it, so even a flush that updates all of
a page's rows (memories first accessed together, accessed together again) is HOT; and only
the primary key is indexed anyway. The same flush: 18 ms for 300 first accesses, 3 ms for
300 more, every update HOT. Keyed by the memory's id, referencing memory_key (a
hypertable's rows cannot be the target of a foreign key), so a hard delete of the memory's
key removes its counts.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE memory_access (
            memory_id         bigint PRIMARY KEY
                              REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            access_count      integer NOT NULL,
            last_accessed_at  timestamptz
        ) WITH (fillfactor = 50)""")
    op.execute("""
        INSERT INTO memory_access (memory_id, access_count, last_accessed_at)
        SELECT m.id, m.access_count, m.last_accessed_at
        FROM memory m JOIN memory_key k ON k.memory_id = m.id
        WHERE m.access_count > 0 OR m.last_accessed_at IS NOT NULL""")
    op.execute("ALTER TABLE memory DROP COLUMN access_count, DROP COLUMN last_accessed_at")


def downgrade() -> None:
    op.execute("""
        ALTER TABLE memory ADD COLUMN access_count integer NOT NULL DEFAULT 0,
                           ADD COLUMN last_accessed_at timestamptz""")
    op.execute("""
        UPDATE memory m SET access_count = a.access_count, last_accessed_at = a.last_accessed_at
        FROM memory_access a WHERE a.memory_id = m.id""")
    op.execute("DROP TABLE memory_access")
