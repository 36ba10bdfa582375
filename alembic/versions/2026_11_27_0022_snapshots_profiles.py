"""Working-memory snapshots (issue 35, item 3); profiles (item 4) need no table of their own:
a profile's slots are memories (metadata `subject`, `attribute`, `profile`).

- `working_memory_snapshot`: one row per snapshot of a robot's working memory, its item count
  and token total when taken.
- `working_memory_snapshot_item`: what the mirror held at that instant, in its order: each
  memory (id, key, the version held) with the fields a rebuild needs to place it as it was
  (importance, tokens, added and last access, placed by a recall or not).
- `working_memory_snapshot_readable`: the memories the robot could read at that instant.

No foreign key to memory: a snapshot outlives what it names (a restore skips the memories
forgotten since, and reports them).

Revision ID: 0022
Revises: 0020
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE working_memory_snapshot (
            id bigserial PRIMARY KEY,
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            robot_id bigint NOT NULL REFERENCES robot(id) ON DELETE CASCADE,
            name text,
            created_at timestamptz NOT NULL,
            item_count integer NOT NULL,
            tokens integer NOT NULL
        )""")
    op.execute(
        "CREATE INDEX working_memory_snapshot_robot ON working_memory_snapshot (robot_id, id)"
    )
    op.execute("""
        CREATE TABLE working_memory_snapshot_item (
            snapshot_id bigint NOT NULL
                REFERENCES working_memory_snapshot(id) ON DELETE CASCADE,
            position integer NOT NULL,
            memory_id bigint NOT NULL,
            key varchar(128) NOT NULL,
            version integer NOT NULL,
            tokens integer NOT NULL,
            importance double precision NOT NULL,
            added_at timestamptz NOT NULL,
            last_access_at timestamptz NOT NULL,
            from_recall boolean NOT NULL,
            PRIMARY KEY (snapshot_id, position)
        )""")
    op.execute("""
        CREATE TABLE working_memory_snapshot_readable (
            snapshot_id bigint NOT NULL
                REFERENCES working_memory_snapshot(id) ON DELETE CASCADE,
            memory_id bigint NOT NULL,
            PRIMARY KEY (snapshot_id, memory_id)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE working_memory_snapshot_readable")
    op.execute("DROP TABLE working_memory_snapshot_item")
    op.execute("DROP TABLE working_memory_snapshot")
