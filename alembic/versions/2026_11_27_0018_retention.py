"""Retention that archives (issue 33).

- `retention_policy`: a namespace's policies, each for one memory type or every type (NULL):
  `idle` (no access for `days`), `stale` (staleness at least `threshold`, app/retention), or
  `superseded` (its validity ended `days` ago).
- `memory.archived`: the rule that archived the memory. An archive is a soft delete (the
  memory leaves recall, context and working memory, stays restorable and exportable) that
  says which policy did it; a restore or a forget clears it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory ADD COLUMN archived varchar(16)")
    op.execute("""
        CREATE TABLE retention_policy (
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            type varchar(32),
            rule varchar(16) NOT NULL CHECK (rule IN ('idle', 'stale', 'superseded')),
            days integer NOT NULL CHECK (days BETWEEN 1 AND 36500),
            threshold double precision CHECK (threshold > 0 AND threshold <= 1),
            position integer NOT NULL,
            PRIMARY KEY (namespace_id, position)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE retention_policy")
    op.execute("ALTER TABLE memory DROP COLUMN archived")
