"""The two-tier write protocol's bookkeeping, a terminal embedding status, filter indexes.

- memory.version: bumped by every replace. A placement into working memory names the version
  it read and is skipped when the row moved on (or was forgotten) meanwhile.
- robot.wm_gen / robot.wm_seq: the (generation, sequence) of the robot's last working-memory
  change that Postgres recorded. Changes run under the robot's row lock, so the next one
  must reply (wm_gen, wm_seq + 1); anything else means Redis lost data or a change went
  unrecorded, and the working memory is rebuilt.
- working_memory_item.stale_at: set in the durable transaction that replaces or forgets a
  memory, for every robot holding it; cleared when that robot's Redis copy is gone. What is
  still set a few seconds later (an outage, a crash in between) is repaired in the background.
- embedding_status 'failed': a memory the provider could not embed after the worker's last
  attempt; it stays out of vector search and is reported, instead of being retried forever.
- GIN indexes for tag and metadata-containment filters, which scanned a whole namespace.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory ADD COLUMN version integer NOT NULL DEFAULT 1")
    op.execute("ALTER TABLE memory DROP CONSTRAINT memory_embedding_status_check")
    op.execute("""
        ALTER TABLE memory ADD CONSTRAINT memory_embedding_status_check
            CHECK (embedding_status IN ('ready', 'pending', 'failed'))""")
    op.execute("ALTER TABLE robot ADD COLUMN wm_gen bigint, ADD COLUMN wm_seq bigint")
    op.execute("ALTER TABLE working_memory_item ADD COLUMN stale_at timestamptz")
    op.execute("""
        CREATE INDEX working_memory_item_holders
            ON working_memory_item (memory_id) WHERE in_working_memory""")
    op.execute("""
        CREATE INDEX working_memory_item_stale
            ON working_memory_item (stale_at) WHERE stale_at IS NOT NULL""")
    op.execute("CREATE INDEX robot_working_memory_stale ON robot (id) WHERE working_memory_stale")
    op.execute("CREATE INDEX memory_tags ON memory USING gin (tags)")
    op.execute("CREATE INDEX memory_metadata ON memory USING gin (metadata jsonb_path_ops)")


def downgrade() -> None:
    for index in (
        "memory_metadata",
        "memory_tags",
        "robot_working_memory_stale",
        "working_memory_item_stale",
        "working_memory_item_holders",
    ):
        op.execute(f"DROP INDEX {index}")
    op.execute("ALTER TABLE working_memory_item DROP COLUMN stale_at")
    op.execute("ALTER TABLE robot DROP COLUMN wm_gen, DROP COLUMN wm_seq")
    op.execute("UPDATE memory SET embedding_status = 'pending' WHERE embedding_status = 'failed'")
    op.execute("ALTER TABLE memory DROP CONSTRAINT memory_embedding_status_check")
    op.execute("""
        ALTER TABLE memory ADD CONSTRAINT memory_embedding_status_check
            CHECK (embedding_status IN ('ready', 'pending'))""")
    op.execute("ALTER TABLE memory DROP COLUMN version")
