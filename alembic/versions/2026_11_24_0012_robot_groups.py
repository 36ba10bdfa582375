"""Robot groups sharing one working memory (issue 19).

- robot.is_group: the row is a group's (named `group:<name>`, which no robot name can be):
  its working memory is the one its members share, kept by the same write protocol as a
  robot's (mirror rows, (gen, seq), the stale flag, repair), with its own budget.
- robot.group_id: the group a robot belongs to (at most one); its working-memory reads and
  writes go to the group's. Deleting the group's row lets its members go.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE robot ADD COLUMN is_group boolean NOT NULL DEFAULT false,
                          ADD COLUMN group_id bigint REFERENCES robot(id) ON DELETE SET NULL""")
    op.execute("CREATE INDEX robot_group ON robot (group_id) WHERE group_id IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX robot_group")
    op.execute("ALTER TABLE robot DROP COLUMN group_id, DROP COLUMN is_group")
