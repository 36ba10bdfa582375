"""Scheduled reflection (issue 33): a namespace's maintenance schedule and the record of
each run.

- `maintenance_schedule`: per namespace, a cron expression (UTC) and the steps a run takes.
- `maintenance_run`: one row per run, its steps' outcomes as they finish (`steps`, JSON), so a
  run cut off is finished by the next (it resumes at the first step not done), and every run
  can be read back (`GET /v1/maintenance/runs`).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE maintenance_schedule (
            namespace_id bigint PRIMARY KEY REFERENCES namespace(id) ON DELETE CASCADE,
            cron text,
            steps text[] NOT NULL,
            dedupe varchar(16) NOT NULL,
            set_at timestamptz NOT NULL
        )""")
    op.execute("""
        CREATE TABLE maintenance_run (
            id bigserial PRIMARY KEY,
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            started_at timestamptz NOT NULL,
            finished_at timestamptz,
            status varchar(16) NOT NULL CHECK (status IN ('running', 'done', 'failed')),
            trigger varchar(16) NOT NULL,
            steps jsonb NOT NULL DEFAULT '{}',
            error text
        )""")
    op.execute("CREATE INDEX maintenance_run_namespace ON maintenance_run (namespace_id, id DESC)")


def downgrade() -> None:
    op.execute("DROP TABLE maintenance_run")
    op.execute("DROP TABLE maintenance_schedule")
