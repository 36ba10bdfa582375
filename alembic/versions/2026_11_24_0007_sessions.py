"""Sessions: the short-term tier between working memory and long-term memory.

`session` is one conversation of a robot, alive until `expires_at` (refreshed on every access
by `ttl_s`, the robot's `session_ttl_s` or the deployment's default when it started). Ending
one (DELETE, or the expiry worker) sets `ended_at` first: from then on nothing is appended to
it, and a new session of the same name can start (the name is unique among live sessions
only). Its messages are then promoted into long-term memory and the row deleted.
`claimed_at` is when a consolidation started (DELETE, or the worker): its lease, so another
pass takes over one a crash left unfinished.

`session_message` holds the messages durably (the Redis hot window is a copy), numbered by
`seq` from 1 within their session (`session.last_seq` is the last one given out), with the
number of reads that returned each one (`access_count`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE robot ADD COLUMN session_ttl_s integer "
        "CHECK (session_ttl_s > 0 AND session_ttl_s <= 31536000)"
    )
    op.execute("""
        CREATE TABLE session (
            id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            namespace_id    bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            robot_id        bigint NOT NULL REFERENCES robot(id) ON DELETE CASCADE,
            name            varchar(64) NOT NULL,
            ttl_s           integer NOT NULL CHECK (ttl_s > 0),
            last_seq        bigint NOT NULL DEFAULT 0,
            created_at      timestamptz NOT NULL,
            last_access_at  timestamptz NOT NULL,
            expires_at      timestamptz NOT NULL,
            ended_at        timestamptz,
            claimed_at      timestamptz
        )""")
    op.execute("""
        CREATE UNIQUE INDEX session_live_name ON session (robot_id, name)
            WHERE ended_at IS NULL""")
    op.execute("CREATE INDEX session_due ON session (expires_at) WHERE ended_at IS NULL")
    op.execute("CREATE INDEX session_ended ON session (claimed_at) WHERE ended_at IS NOT NULL")
    op.execute("""
        CREATE TABLE session_message (
            session_id    bigint NOT NULL REFERENCES session(id) ON DELETE CASCADE,
            seq           bigint NOT NULL,
            role          varchar(16) NOT NULL
                          CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content       text NOT NULL,
            metadata      jsonb NOT NULL DEFAULT '{}',
            remember      boolean NOT NULL DEFAULT false,
            token_count   integer NOT NULL,
            access_count  integer NOT NULL DEFAULT 0,
            created_at    timestamptz NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE session_message")
    op.execute("DROP TABLE session")
    op.execute("ALTER TABLE robot DROP COLUMN session_ttl_s")
