"""Near-duplicates and access tracking (issue 18).

- memory.access_count / memory.last_accessed_at: retrieves and recall hits, counted off the
  request's path (app/memories/access.py) and by a duplicate add that reinforces a memory.
  A constant default and a nullable column: neither rewrites the table.
- memory_content_md5: finds an exact duplicate (same namespace, type and content) of a live
  memory for `dedupe: exact`, without reading contents.
- memory_alias: a key merged into another memory by `htm dedupe` resolves to the survivor.
  Both ends are memory_key rows, so a hard delete of either removes the alias.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory ADD COLUMN access_count integer NOT NULL DEFAULT 0,
                           ADD COLUMN last_accessed_at timestamptz""")
    op.execute("""
        CREATE INDEX memory_content_md5 ON memory (namespace_id, type, md5(content))
            WHERE deleted_at IS NULL""")
    op.execute("""
        CREATE TABLE memory_alias (
            memory_id    bigint PRIMARY KEY
                         REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            survivor_id  bigint NOT NULL
                         REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            merged_at    timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("CREATE INDEX memory_alias_survivor ON memory_alias (survivor_id)")


def downgrade() -> None:
    op.execute("DROP TABLE memory_alias")
    op.execute("DROP INDEX memory_content_md5")
    op.execute("ALTER TABLE memory DROP COLUMN access_count, DROP COLUMN last_accessed_at")
