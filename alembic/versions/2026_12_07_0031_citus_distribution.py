"""Citus (issue 50, first steps): on a Citus coordinator, the namespace-scoped tables
distributed by `namespace_id`, co-located with `memory`, and the small shared tables made
reference tables (a copy on every node). Without Citus, or on a node that is not the
coordinator, this migration does nothing: plain PostgreSQL and TimescaleDB keep their schema,
and schema.sql is unchanged by it.

Why a migration and not a command: Citus is detected at migration time exactly like
TimescaleDB (0001, 0024), so a database migrated on a coordinator is distributed by the same
`htm migrate` (or any command's start) that makes it, with no step an operator can forget,
and a later migration's DDL runs on the distributed tables (Citus propagates it to the
shards). Every migration before this one makes plain local tables on the coordinator.

What Citus needs, and what changes for it (on Citus only):

- A distributed table's primary and unique keys must include the distribution column:
  memory (id, created_at), memory_key (memory_id), memory_event (id, at), memory_link
  (source_id, target_id, type), session (id) and its live-name index (robot_id, name),
  pool (id), maintenance_run (id), working_memory_snapshot (id) get `namespace_id` in front.
  Plain PostgreSQL keeps its keys: two of them are ON CONFLICT targets in the code
  (memory_link's, session's live name), which therefore do not yet work on Citus (below).
- A foreign key between distributed tables must be on the distribution column, and a
  reference table may not point at a distributed one. robot_activity_day, written by the
  event trigger alone, gets a `namespace_id` (from its robot) and is distributed. The other
  tables with no `namespace_id` (memory_access, memory_alias, memory_version, robot_state,
  session_message, working_memory_item, working_memory_snapshot_item,
  working_memory_snapshot_readable) become reference tables for now, and their foreign keys
  to memory_key, session and working_memory_snapshot are dropped: on Citus a memory's
  forgetting no longer cascades to them. Each needs a `namespace_id` column to be
  distributed and co-located; that is the next step.
- Triggers on distributed tables: allowed with citus.enable_unsafe_triggers (they fire on the
  shard, on the worker). A statement trigger's transition table is not (the shard's executor
  has no "inserted" tuplestore), so the counting goes back to 0004's row triggers, as on a
  TimescaleDB older than 0024's bound (0014's `*_row_counts`). Their statements get the row's
  namespace (ROUTED_TRIGGERS), so that each runs on the co-located shard of the same worker,
  and they may write other distributed tables at all only with
  citus.allow_nested_distributed_execution, set for the database.
- Tables with foreign keys to namespace and robot would be turned into Citus "local" tables
  when those become reference tables, and Citus cannot then distribute one with an identity
  column (memory_event, session): the keys are dropped first and made again after.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op
from sqlalchemy import text

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Shards per distributed table: Citus's default (32) makes 32 x 15 shard tables, each with its
# own indexes, on two workers; 8 still spreads namespaces over up to 8 nodes (a shard moves
# whole to a new node: citus_rebalance_start).
SHARD_COUNT = 8

# Small, shared, read by every request: a copy on every node, so a router query joins them
# locally.
REFERENCE = ("namespace", "robot", "api_key")

# Distributed by namespace_id, co-located with memory: one namespace's rows on one node.
DISTRIBUTED = (
    "memory", "memory_key", "memory_event", "memory_link", "memory_tag",
    "namespace_memory_count", "robot_memory_count", "session", "entity_alias", "speaker",
    "retention_policy", "maintenance_run", "maintenance_schedule", "pool",
    "working_memory_snapshot", "robot_activity_day",
)  # fmt: skip

# Namespace-scoped but without a namespace_id column yet: reference tables until they have one.
NO_NAMESPACE_COLUMN = (
    "memory_access", "memory_alias", "memory_version", "robot_state",
    "session_message", "working_memory_item", "working_memory_snapshot_item",
    "working_memory_snapshot_readable",
)  # fmt: skip

# The keys that must include the distribution column: (table, constraint, its new columns).
KEYS = (
    ("memory", "memory_pkey", "PRIMARY KEY (namespace_id, id, created_at)"),
    ("memory_key", "memory_key_memory_id_key", "UNIQUE (namespace_id, memory_id)"),
    ("memory_event", "memory_event_pkey", "PRIMARY KEY (namespace_id, id, at)"),
    ("memory_link", "memory_link_pkey", "PRIMARY KEY (namespace_id, source_id, target_id, type)"),
    ("session", "session_pkey", "PRIMARY KEY (namespace_id, id)"),
    ("pool", "pool_pkey", "PRIMARY KEY (namespace_id, id)"),
    ("maintenance_run", "maintenance_run_pkey", "PRIMARY KEY (namespace_id, id)"),
    ("working_memory_snapshot", "working_memory_snapshot_pkey", "PRIMARY KEY (namespace_id, id)"),
    (
        "robot_activity_day",
        "robot_activity_day_pkey",
        "PRIMARY KEY (namespace_id, robot_id, day, slot)",
    ),
)

# The trigger functions' statements, each given the row's namespace (and memory_link's
# conflict target its new key): run on a shard's worker, a statement that names its namespace
# goes to the co-located shard on that same worker; one that does not fans out to every shard
# from inside the shard's transaction, and in that state Citus 14.0.1's worker crashed
# (signal 11 at COMMIT PREPARED) on the second add through the API. (old, new) pairs, each
# found exactly where given.
ROUTED_TRIGGERS: dict[str, tuple[tuple[str, str], ...]] = {
    "memory_count_new": (
        ("WHERE id = NEW.id AND", "WHERE namespace_id = NEW.namespace_id AND id = NEW.id AND"),
    ),
    "memory_count_old": (
        ("WHERE id = OLD.id AND", "WHERE namespace_id = OLD.namespace_id AND id = OLD.id AND"),
    ),
    "memory_link_forget": (
        ("WHERE source_id = OLD", "WHERE namespace_id = OLD.namespace_id AND source_id = OLD"),
        ("WHERE target_id = OLD", "WHERE namespace_id = OLD.namespace_id AND target_id = OLD"),
        ("WHERE memory_id = OLD", "WHERE namespace_id = OLD.namespace_id AND memory_id = OLD"),
    ),
    # robot_activity_day gets a namespace_id on Citus (it is written by these triggers
    # alone): as a reference table, its write from a shard's trigger made Citus 14.0.1's
    # worker crash at COMMIT PREPARED (ErrorIfPostCommitFailedShardPlacements).
    "robot_activity_apply": (
        ("AS $function$",
         "AS $function$\n    DECLARE ns bigint := (SELECT namespace_id FROM robot"
         " WHERE id = p_robot);"),
        ("(robot_id, day, slot, adds", "(namespace_id, robot_id, day, slot, adds"),
        ("VALUES (p_robot,", "VALUES (ns, p_robot,"),
        ("ON CONFLICT (robot_id, day, slot)", "ON CONFLICT (namespace_id, robot_id, day, slot)"),
    ),
    "memory_count_rebuild": (
        ("(robot_id, day, slot, adds", "(namespace_id, robot_id, day, slot, adds"),
        ("SELECT robot_id, (at AT TIME ZONE", "SELECT namespace_id, robot_id, (at AT TIME ZONE"),
        ("WHERE robot_id IS NOT NULL\n            GROUP BY 1, 2;",
         "WHERE robot_id IS NOT NULL\n            GROUP BY 1, 2, 3;"),
    ),
    "memory_link_sync": (
        ("WHERE k.memory_id = CASE",
         "WHERE k.namespace_id = NEW.namespace_id AND k.memory_id = CASE"),
        ("WHERE source_id = OLD.superseded_by",
         "WHERE namespace_id = NEW.namespace_id AND source_id = OLD.superseded_by"),
        ("WHERE k.memory_id = NEW.superseded_by",
         "WHERE k.namespace_id = NEW.namespace_id AND k.memory_id = NEW.superseded_by"),
        ("DELETE FROM memory_tag WHERE memory_id",
         "DELETE FROM memory_tag WHERE namespace_id = NEW.namespace_id AND memory_id"),
        ("DELETE FROM memory_link WHERE source_id = NEW.id",
         "DELETE FROM memory_link WHERE namespace_id = NEW.namespace_id AND source_id = NEW.id"),
        ("JOIN memory_key k ON k.memory_id = c.memory_id",
         "JOIN memory_key k ON k.namespace_id = NEW.namespace_id AND k.memory_id = c.memory_id"),
        ("JOIN memory o ON o.id = k.memory_id",
         "JOIN memory o ON o.namespace_id = NEW.namespace_id AND o.id = k.memory_id"),
        ("ON CONFLICT (source_id, target_id, type)",
         "ON CONFLICT (namespace_id, source_id, target_id, type)"),
    ),
}  # fmt: skip

# Foreign keys that cannot hold across the distribution (to a distributed table, not on its
# distribution column, or from a reference table to a distributed one).
DROPPED_FOREIGN_KEYS = (
    ("memory_access", "memory_access_memory_id_fkey"),
    ("memory_alias", "memory_alias_memory_id_fkey"),
    ("memory_alias", "memory_alias_survivor_id_fkey"),
    ("memory_version", "memory_version_memory_id_fkey"),
    ("session_message", "session_message_session_id_fkey"),
    ("working_memory_snapshot_item", "working_memory_snapshot_item_snapshot_id_fkey"),
    ("working_memory_snapshot_readable", "working_memory_snapshot_readable_snapshot_id_fkey"),
)


def citus_coordinator() -> bool:
    """True on a database with the citus extension, on its coordinator."""
    bind = op.get_bind()
    if bind.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).scalar() is None:
        return False
    return bool(bind.execute(text("SELECT citus_is_coordinator()")).scalar())


def _statement_counting() -> ModuleType:
    """Migration 0014's module: the way back to its row triggers."""
    path = next(Path(__file__).parent.glob("*_0014_statement_counting.py"))
    spec = importlib.util.spec_from_file_location("htm_migration_0014", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    if not citus_coordinator():
        return
    # One connection per node for the whole transaction: the DDL, the reference tables'
    # copies and the distribution below may not mix with parallel shard connections.
    op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute(f"SET LOCAL citus.shard_count = {SHARD_COUNT}")
    op.execute("SET LOCAL citus.enable_unsafe_triggers = on")
    counting = _statement_counting()
    counting.memory_row_counts()
    counting.event_row_counts()
    op.execute("ALTER TABLE robot_activity_day ADD COLUMN namespace_id bigint")
    op.execute("""UPDATE robot_activity_day d SET namespace_id = r.namespace_id
                  FROM robot r WHERE r.id = d.robot_id""")
    op.execute("ALTER TABLE robot_activity_day ALTER COLUMN namespace_id SET NOT NULL")
    _route_triggers()
    for table, name in DROPPED_FOREIGN_KEYS:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for table, name, columns in KEYS:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}, ADD CONSTRAINT {name} {columns}")
    op.execute("DROP INDEX session_live_name")
    op.execute("""CREATE UNIQUE INDEX session_live_name ON session (namespace_id, robot_id, name)
                  WHERE ended_at IS NULL""")
    bind = op.get_bind()
    # The foreign keys to namespace and robot, kept aside while those become reference tables.
    shared = bind.execute(
        text("""
        SELECT conrelid::regclass::text AS tbl, conname, pg_get_constraintdef(oid) AS definition
        FROM pg_constraint
        WHERE contype = 'f' AND confrelid IN ('namespace'::regclass, 'robot'::regclass)
          AND conrelid <> 'robot'::regclass
        ORDER BY 1, 2""")
    ).all()
    for fk in shared:
        op.execute(f"ALTER TABLE {fk.tbl} DROP CONSTRAINT {fk.conname}")
    for table in REFERENCE + NO_NAMESPACE_COLUMN:
        op.execute(f"SELECT create_reference_table('{table}')")
    op.execute("SELECT create_distributed_table('memory', 'namespace_id')")
    for table in DISTRIBUTED[1:]:
        op.execute(
            f"SELECT create_distributed_table('{table}', 'namespace_id', colocate_with => 'memory')"
        )
    for fk in shared:
        op.execute(f"ALTER TABLE {fk.tbl} ADD CONSTRAINT {fk.conname} {fk.definition}")
    # The counting and relationship triggers fire on a shard, on its worker, and write the
    # other tables (counters, links, tags) by their names: distributed queries, which Citus
    # refuses inside a shard's statement unless this is on (Citus propagates the setting to
    # the workers' copy of the database). Rewriting them to touch only their co-located
    # shards is what would let it go.
    op.execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET "
        "citus.allow_nested_distributed_execution = on', current_database()); END $$"
    )


def _route_triggers() -> None:
    """ROUTED_TRIGGERS applied to the functions as the migrations before made them."""
    bind = op.get_bind()
    for function, edits in ROUTED_TRIGGERS.items():
        body = bind.execute(
            text("SELECT pg_get_functiondef(CAST(:f AS regproc))"), {"f": function}
        ).scalar_one()
        for old, new in edits:
            if old not in body:
                raise RuntimeError(f"0031: {function}() no longer holds {old!r}")
            body = body.replace(old, new)
        # As the driver's text, with no bind parameters: none of these bodies holds a % sign.
        assert "%" not in body
        bind.exec_driver_sql(body)


def downgrade() -> None:
    if not citus_coordinator():
        return
    # undistribute_table refuses tables with identity columns (memory_event, session, ...).
    raise RuntimeError(
        "0031 distributed this database's tables over a Citus cluster and cannot be undone in "
        "place: pg_dump the data and restore it into a database migrated to 0030"
    )
