"""Who may see what (issue 35): memory visibility, pools with grants, keys bound to a robot.

- `memory.visibility`: `namespace` (every robot of the namespace: the default, what every
  existing memory keeps), `private` (its author, and the robots named in `memory.readers`),
  `group` (the robots of the group in `memory.group_id`, a group's robot row, and its author)
  or `pool` (the robots the pool `memory.pool_id` grants reading). app/visibility.py renders
  the one predicate every read path adds to its SQL. `memory_restricted` serves the reads of
  the memories that are not namespace-wide (a robot's private ones, a group's), `memory_pool`
  a pool's.
- `pool`: a namespace's named pools, of a type (`shared`, `team`, `task`, which expires), with
  robot names granted `readers` and `writers` (a writer reads too) and `public_read`. An
  expired task pool is archived (`archived_at`), its memories archived too, never deleted.
- `api_key.robot`: a key bound to a robot acts only as that robot (403 for any other), so a
  robot's private memories are private from the holders of other robots' keys.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE pool (
            id bigserial PRIMARY KEY,
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            name varchar(64) NOT NULL,
            type varchar(16) NOT NULL CHECK (type IN ('shared', 'team', 'task')),
            readers text[] NOT NULL DEFAULT '{}',
            writers text[] NOT NULL DEFAULT '{}',
            public_read boolean NOT NULL DEFAULT false,
            expires_at timestamptz,
            archived_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (namespace_id, name),
            CHECK ((type = 'task') = (expires_at IS NOT NULL))
        )""")
    op.execute("""
        ALTER TABLE memory
            ADD COLUMN visibility varchar(16) NOT NULL DEFAULT 'namespace',
            ADD COLUMN readers text[] NOT NULL DEFAULT '{}',
            ADD COLUMN group_id bigint,
            ADD COLUMN pool_id bigint""")
    op.execute("""
        ALTER TABLE memory
            ADD CONSTRAINT memory_visibility_check CHECK (
                visibility IN ('namespace', 'private', 'group', 'pool')
                AND (visibility = 'group') = (group_id IS NOT NULL)
                AND (visibility = 'pool') = (pool_id IS NOT NULL)
                AND (visibility = 'private' OR readers = '{}'))""")
    op.execute("""
        CREATE INDEX memory_restricted ON memory (namespace_id, author_robot_id, created_at DESC)
        WHERE visibility IN ('private', 'group')""")
    op.execute("""
        CREATE INDEX memory_pool ON memory (pool_id, created_at DESC)
        WHERE pool_id IS NOT NULL""")
    op.execute("ALTER TABLE api_key ADD COLUMN robot varchar(64)")


def downgrade() -> None:
    op.execute("ALTER TABLE api_key DROP COLUMN robot")
    op.execute("DROP INDEX memory_pool")
    op.execute("DROP INDEX memory_restricted")
    op.execute("ALTER TABLE memory DROP CONSTRAINT memory_visibility_check")
    op.execute(
        "ALTER TABLE memory DROP COLUMN pool_id, DROP COLUMN group_id, DROP COLUMN readers, "
        "DROP COLUMN visibility"
    )
    op.execute("DROP TABLE pool")
