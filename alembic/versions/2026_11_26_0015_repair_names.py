"""Robot and namespace names the API accepts (issue 29).

Before the naming rule moved into the services that register names (app/names.py), `htm
load --robot` and the CLI's `--namespace` stored names that the HTTP API refuses, such as
`bad robot!`: from then on that namespace's stats answered 500 (working memory's Redis keys
cannot be built for such a name) and no request could address the robot. Each such name is
rewritten to the rule, `[A-Za-z0-9._-]{1,64}`: every other character becomes `-`; a name taken
already gets `-<id>` added. Memories, keys and sessions refer to ids, not names, and such a
robot never had working memory in Redis, so nothing else changes. Group rows (`group:<name>`,
made only through the API) are left as they are. The downgrade keeps the repaired names.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_VALID = "'^[A-Za-z0-9._-]{1,64}$'"


def _repair(table: str, scope: str, where: str) -> str:
    """A DO block renaming each invalid name of `table`; `scope` is the uniqueness clause
    that a new name must be free in (the row's namespace for robots)."""
    return f"""
    DO $$
    DECLARE r record; base text; fixed text;
    BEGIN
        FOR r IN SELECT * FROM {table} WHERE name !~ {_VALID} {where} ORDER BY id LOOP
            base := left(regexp_replace(r.name, '[^A-Za-z0-9._-]', '-', 'g'), 64);
            IF base = '' THEN base := '{table}'; END IF;
            fixed := base;
            IF EXISTS (SELECT 1 FROM {table} t WHERE t.name = fixed {scope}) THEN
                fixed := left(base, 63 - length(r.id::text)) || '-' || r.id;
            END IF;
            UPDATE {table} SET name = fixed WHERE id = r.id;
            RAISE NOTICE '{table} % renamed to %', r.name, fixed;
        END LOOP;
    END $$"""


def upgrade() -> None:
    op.execute(_repair("robot", "AND t.namespace_id = r.namespace_id", "AND NOT is_group"))
    op.execute(_repair("namespace", "", ""))


def downgrade() -> None:
    pass  # the old names were unusable
