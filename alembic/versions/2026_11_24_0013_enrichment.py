"""LLM enrichment of new memories (issue 18): tags proposed from the namespace's ontology and,
for long memories, propositions as child memories (app/enrichment).

- memory.enrichment_status: NULL (nothing to do: no LLM was configured when it was added, or
  it is a proposition or a summary), 'pending', 'done' or 'failed' (gave up; the error is
  kept); with enrichment_attempts / enrichment_next_at / enrichment_error, the embedding
  worker's discipline: leases, retries with backoff, a terminal failure. Nullable columns and
  a constant default: no table rewrite.
- memory_pending_enrichment: the worker's queue.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory
            ADD COLUMN enrichment_status varchar(16)
                CHECK (enrichment_status IN ('pending', 'done', 'failed')),
            ADD COLUMN enrichment_attempts integer NOT NULL DEFAULT 0,
            ADD COLUMN enrichment_next_at timestamptz,
            ADD COLUMN enrichment_error text""")
    op.execute("""
        CREATE INDEX memory_pending_enrichment ON memory (enrichment_next_at)
            WHERE enrichment_status = 'pending'""")


def downgrade() -> None:
    op.execute("DROP INDEX memory_pending_enrichment")
    op.execute("""
        ALTER TABLE memory DROP COLUMN enrichment_status, DROP COLUMN enrichment_attempts,
                           DROP COLUMN enrichment_next_at, DROP COLUMN enrichment_error""")
