"""A robot's last recorded working-memory change (generation, sequence) moves from `robot` to
`working_memory_change` (namespace_id, robot_id), whose row lock now orders the robot's
working-memory changes (issue 50).

On Citus `robot` is a reference table: every write to it is a transaction on every node,
committed in two phases, and Citus serializes the UPDATEs of a reference table cluster-wide.
Every working-memory change locked the robot's row and wrote its (wm_gen, wm_seq), so every
placement of every robot in every namespace queued behind one another (bench/citus.py: adds
that place 13/s against 88/s that do not, at c=8), and none could run while a worker was
down. `working_memory_change` is distributed by namespace_id, co-located with `memory` and
`working_memory_item`: a change's lock, record and mirror rows are one shard's.

The robot's working_memory_stale flag stays on `robot` (it is written only when Redis was
unreachable, and read with the robot). A rebuild of a stale robot locks that row too
(app/working_memory/repository.py, MembershipRepository.lock).

Every robot gets its row here; a robot registered later gets it from its first change.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARD_COUNT = 8  # as 0031 (co-located with memory)
ROBOT_FK = "working_memory_change_robot_id_fkey"


def citus_coordinator() -> bool:
    """True on a database with the citus extension, on its coordinator (as 0031)."""
    bind = op.get_bind()
    if bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).scalar() is None:
        return False
    return bool(bind.execute(text("SELECT citus_is_coordinator()")).scalar())


def upgrade() -> None:
    citus = citus_coordinator()
    op.execute("""
        CREATE TABLE working_memory_change (
            namespace_id bigint NOT NULL,
            robot_id bigint NOT NULL,
            gen bigint,
            seq bigint,
            PRIMARY KEY (namespace_id, robot_id)
        )""")
    if citus:
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        op.execute(f"SET LOCAL citus.shard_count = {SHARD_COUNT}")
        op.execute(
            "SELECT create_distributed_table('working_memory_change', 'namespace_id', "
            "colocate_with => 'memory')"
        )
    op.execute(f"""ALTER TABLE working_memory_change ADD CONSTRAINT {ROBOT_FK}
                   FOREIGN KEY (robot_id) REFERENCES robot(id) ON DELETE CASCADE""")
    op.execute("""INSERT INTO working_memory_change (namespace_id, robot_id, gen, seq)
                  SELECT namespace_id, id, wm_gen, wm_seq FROM robot""")
    op.execute("ALTER TABLE robot DROP COLUMN wm_gen, DROP COLUMN wm_seq")


def downgrade() -> None:
    if citus_coordinator():
        raise RuntimeError(
            "0034 distributed working_memory_change over a Citus cluster and cannot be undone "
            "in place: pg_dump the data and restore it into a database migrated to 0033"
        )
    op.execute("ALTER TABLE robot ADD COLUMN wm_gen bigint, ADD COLUMN wm_seq bigint")
    op.execute("""UPDATE robot r SET wm_gen = c.gen, wm_seq = c.seq
                  FROM working_memory_change c WHERE c.robot_id = r.id""")
    op.execute("DROP TABLE working_memory_change")
