"""working_memory_item gets `namespace_id` (its robot's), in front of its primary key, and on
a Citus coordinator it is distributed by it, co-located with `memory` (issue 50).

Until now the mirror of working memory was keyed by (robot_id, memory_id) alone, so on Citus
(migration 0031) it could only be a reference table: a copy on every node, written by every
change on all of them, and Citus refused a rebuild's record (an UPDATE of it with EXISTS on
the distributed memory_key in one statement), so no robot's working memory was ever built.
With the namespace in the row, every statement of app/working_memory/repository.py names it
and runs as one task on the namespace's shard, beside the memories it refers to.

On plain PostgreSQL and TimescaleDB the column and the key are the same, so there is one
schema: the key's index grows by 8 bytes a row, and the robot's lookups (robot_id, ...) use
the partial indexes working_memory_item_members / _holders as before.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As 0031: shards per distributed table (must match memory's, to be co-located with it).
SHARD_COUNT = 8
ROBOT_FK = "working_memory_item_robot_id_fkey"


def citus_coordinator() -> bool:
    """True on a database with the citus extension, on its coordinator (as 0031)."""
    bind = op.get_bind()
    if bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).scalar() is None:
        return False
    return bool(bind.execute(text("SELECT citus_is_coordinator()")).scalar())


def upgrade() -> None:
    citus = citus_coordinator()
    if citus:
        # 0031 made it a reference table; back to a local one (its foreign key to the robot
        # reference table first: undistributing would otherwise take robot along).
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        op.execute(f"SET LOCAL citus.shard_count = {SHARD_COUNT}")
        op.execute(f"ALTER TABLE working_memory_item DROP CONSTRAINT {ROBOT_FK}")
        op.execute("SELECT undistribute_table('working_memory_item')")
    op.execute("ALTER TABLE working_memory_item ADD COLUMN namespace_id bigint")
    op.execute("""UPDATE working_memory_item w SET namespace_id = r.namespace_id
                  FROM robot r WHERE r.id = w.robot_id""")
    op.execute("ALTER TABLE working_memory_item ALTER COLUMN namespace_id SET NOT NULL")
    op.execute("""ALTER TABLE working_memory_item DROP CONSTRAINT working_memory_item_pkey,
                  ADD CONSTRAINT working_memory_item_pkey
                  PRIMARY KEY (namespace_id, robot_id, memory_id)""")
    if citus:
        op.execute(
            "SELECT create_distributed_table('working_memory_item', 'namespace_id', "
            "colocate_with => 'memory')"
        )
        op.execute(f"""ALTER TABLE working_memory_item ADD CONSTRAINT {ROBOT_FK}
                       FOREIGN KEY (robot_id) REFERENCES robot(id) ON DELETE CASCADE""")


def downgrade() -> None:
    if citus_coordinator():
        raise RuntimeError(
            "0033 distributed working_memory_item over a Citus cluster (as 0031 did the "
            "others) and cannot be undone in place: pg_dump the data and restore it into a "
            "database migrated to 0032"
        )
    op.execute("""ALTER TABLE working_memory_item DROP CONSTRAINT working_memory_item_pkey,
                  ADD CONSTRAINT working_memory_item_pkey PRIMARY KEY (robot_id, memory_id)""")
    op.execute("ALTER TABLE working_memory_item DROP COLUMN namespace_id")
