"""The other two kinds of step of a memory's learned importance (issue 47, item 4;
app/memories/learning.py): how many times it was pinned (`pins`) and how many times a memory
near it was forgotten (`nearby_forgets`), beside `uses` and `misses` (0027). The steps
themselves are composed into learn_scale and learn_shift as before; these are their counts,
which `explain` and a read show.

Revision ID: 0032
Revises: 0030
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory_access
            ADD COLUMN pins integer NOT NULL DEFAULT 0,
            ADD COLUMN nearby_forgets integer NOT NULL DEFAULT 0""")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_access DROP COLUMN pins, DROP COLUMN nearby_forgets")
