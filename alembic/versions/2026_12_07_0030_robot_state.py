"""A robot's state: key-value working state with versions, expiry and pins (issue 48).

`robot_state` is the truth of every state key (app/state/): one row per (holder, key), the
holder being the robot or its group's row (`group:<name>`, a group's blackboard). `version`
comes from one sequence, so a key's versions increase across a delete and a re-creation:
the Redis copy keeps only a newer version than it holds (scripts/state.lua), and a delete's
tombstone there outranks every read that began before it. `tokens` is the count of the
note a prompt places for a pinned key (app/state/service.py `note_text`), so the pinned cap
is one SUM. `value` is `json`, not `jsonb`: the text is kept as written, so the note counted
at write time is the note a prompt places. A robot's removal removes its state.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE robot_state_version AS bigint")
    op.execute("""
        CREATE TABLE robot_state (
            robot_id bigint NOT NULL REFERENCES robot(id) ON DELETE CASCADE,
            key text NOT NULL,
            value json NOT NULL,
            version bigint NOT NULL,
            pinned boolean NOT NULL DEFAULT false,
            tokens integer NOT NULL,
            expires_at timestamptz,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            updated_by text NOT NULL,
            PRIMARY KEY (robot_id, key)
        )""")
    op.execute("CREATE INDEX robot_state_pinned ON robot_state (robot_id) WHERE pinned")


def downgrade() -> None:
    op.execute("DROP TABLE robot_state")
    op.execute("DROP SEQUENCE robot_state_version")
