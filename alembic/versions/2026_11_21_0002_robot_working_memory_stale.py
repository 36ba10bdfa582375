"""robot.working_memory_stale: Redis may hold removals it never heard of.

Set when a clear, forget or access could not reach Redis. Redis may come back with its data
intact (a network blip rather than a restart), still holding what Postgres already removed;
the next request for that robot then rebuilds its working memory from Postgres, which is
right by construction, and clears the flag.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE robot ADD COLUMN working_memory_stale boolean NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE robot DROP COLUMN working_memory_stale")
