"""Summaries of what working memory evicts, per robot (off by default).

- robot.summarize_evictions: the robot asked for summaries (PUT /v1/robots/{robot}).
- robot.summarized_through: the last `evict` event (memory_event.id) a summary covered, or
  the last one before summaries were turned on: the worker's watermark.
- memory_event_evict: the worker reads a robot's evictions after its watermark, in id order.

Revision ID: 0010
Revises: 0007
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE robot ADD COLUMN summarize_evictions boolean NOT NULL DEFAULT false")
    op.execute("ALTER TABLE robot ADD COLUMN summarized_through bigint NOT NULL DEFAULT 0")
    op.execute(
        "CREATE INDEX memory_event_evict ON memory_event (robot_id, id) WHERE kind = 'evict'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memory_event_evict")
    op.execute("ALTER TABLE robot DROP COLUMN summarized_through")
    op.execute("ALTER TABLE robot DROP COLUMN summarize_evictions")
