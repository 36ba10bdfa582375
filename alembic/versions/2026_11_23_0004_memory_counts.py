"""Counts kept as memories and events change, so statistics read a few rows instead of
counting every memory (GET /v1/robots/{robot}/stats, GET /v1/stats; issue 16).

- robot_memory_count: per robot and type, the memories not deleted, and of those the ones
  whose embedding is pending or failed (a robot's `long_term`).
- namespace_memory_count: per namespace, memories not deleted, deleted, pending, failed, and
  the bytes of every row as stored (`memory_bytes`: pg_column_size of content, metadata,
  tags and embedding).
- robot_activity_day: per robot and UTC day, the events by kind (`activity`); `other` counts
  the kinds not reported (forget, restore, access), whose days still appear, with zeros, as
  they did when the events were counted.

Row triggers keep them in the transaction of every write, whichever statement makes it
(single and batch adds, replaces, moves, soft and hard deletes, restores, the embedding
worker): nothing in the service calls them. Row triggers, not statement triggers with
transition tables: TimescaleDB hypertables take the former, and only recent releases the
latter. A memory's bytes are read back from the stored row: the trigger's OLD and NEW hold
values before TOAST compression (an AFTER INSERT trigger) or decompressed ones (OLD), which
pg_column_size would measure larger. So the old row's share is taken off BEFORE the update
or delete (the row is locked by then, so the change will happen), and the new row's share
added AFTER it, each with the row read back by primary key.

Contention: every add in a namespace changes that namespace's counts, and a row lock is held
until commit, so one counter row per namespace would queue concurrent adds behind each
other's commit (WAL flush included). Each transaction therefore takes the lowest free of 32
stripes (`slot`, claimed with a transaction-scoped advisory lock, pg_try_advisory_xact_lock,
and remembered in a transaction-local setting) and only ever updates rows of its own stripe:
two transactions never wait on the same counter row, so the counters add neither waits nor
deadlocks. Reads sum a key's stripes; lowest-free-first keeps them as few as the peak number
of concurrent writers. Past 32 concurrent writers, a transaction shares a stripe (then waits
as an unstriped counter would).

Writes the triggers do not see: TRUNCATE, TimescaleDB's drop_chunks or retention policies,
and triggers disabled (session_replication_role = replica). After those, run
`SELECT memory_count_rebuild()`, which this migration runs to fill the counts.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STRIPES = 32
# pg_try_advisory_xact_lock(class, stripe): "HTMC", so no other advisory lock collides.
LOCK_CLASS = 0x48544D43

# What one memory row holds for its namespace, as stored (`memory_bytes`): pg_column_size is
# the on-disk size of each value, after compression, out-of-line TOAST values included.
_BYTES = (
    "coalesce(pg_column_size(content), 0) + coalesce(pg_column_size(metadata), 0)"
    " + coalesce(pg_column_size(tags), 0) + coalesce(pg_column_size(embedding), 0)"
)

# An UPDATE that sets none of these changes no count and no stored size: no trigger runs
# (the lease of the embedding worker, for one).
_COUNTED_COLUMNS = (
    "id, created_at, namespace_id, author_robot_id, type, deleted_at, embedding_status, "
    "content, metadata, tags, embedding"
)


def upgrade() -> None:
    op.execute("""
        CREATE TABLE robot_memory_count (
            namespace_id  bigint NOT NULL,
            robot_id      bigint NOT NULL,
            type          varchar(32) NOT NULL,
            slot          smallint NOT NULL,
            memories      bigint NOT NULL,
            pending       bigint NOT NULL,
            failed        bigint NOT NULL,
            PRIMARY KEY (namespace_id, robot_id, type, slot)
        ) WITH (fillfactor = 50)""")
    op.execute("""
        CREATE TABLE namespace_memory_count (
            namespace_id  bigint NOT NULL,
            slot          smallint NOT NULL,
            memories      bigint NOT NULL,
            deleted       bigint NOT NULL,
            pending       bigint NOT NULL,
            failed        bigint NOT NULL,
            bytes         bigint NOT NULL,
            PRIMARY KEY (namespace_id, slot)
        ) WITH (fillfactor = 50)""")
    op.execute("""
        CREATE TABLE robot_activity_day (
            robot_id   bigint NOT NULL,
            day        date NOT NULL,
            slot       smallint NOT NULL,
            adds       bigint NOT NULL,
            recalls    bigint NOT NULL,
            evictions  bigint NOT NULL,
            other      bigint NOT NULL,
            PRIMARY KEY (robot_id, day, slot)
        ) WITH (fillfactor = 50)""")
    # Fillfactor 50: the counter rows are updated all the time, and room on their page lets
    # each update be a HOT one (no index entry, pruned in place).

    op.execute(f"""
        CREATE FUNCTION memory_count_slot() RETURNS smallint LANGUAGE plpgsql AS $$
        DECLARE
            claimed text := current_setting('htm.memory_count_slot', true);
        BEGIN
            -- '' once a transaction that set it has ended (a custom setting stays defined).
            IF claimed IS NOT NULL AND claimed <> '' THEN
                RETURN claimed::smallint;
            END IF;
            FOR s IN 0..{STRIPES - 1} LOOP
                IF pg_try_advisory_xact_lock({LOCK_CLASS}, s) THEN
                    PERFORM set_config('htm.memory_count_slot', s::text, true);
                    RETURN s;
                END IF;
            END LOOP;
            -- Every stripe is taken: share one, unclaimed (its row locks then serialise).
            PERFORM set_config('htm.memory_count_slot',
                               (pg_backend_pid() % {STRIPES})::text, true);
            RETURN pg_backend_pid() % {STRIPES};
        END $$""")
    op.execute("""
        CREATE FUNCTION memory_count_apply(
            p_ns bigint, p_robot bigint, p_type text, p_deleted boolean, p_status text,
            p_bytes bigint, p_sign integer
        ) RETURNS void LANGUAGE plpgsql AS $$
        DECLARE
            s smallint := memory_count_slot();
            live integer := CASE WHEN p_deleted THEN 0 ELSE p_sign END;
            pend integer := CASE WHEN p_status = 'pending' THEN live ELSE 0 END;
            fail integer := CASE WHEN p_status = 'failed' THEN live ELSE 0 END;
        BEGIN
            IF live <> 0 THEN  -- a robot's counts are of memories not deleted
                INSERT INTO robot_memory_count AS c
                    (namespace_id, robot_id, type, slot, memories, pending, failed)
                VALUES (p_ns, p_robot, p_type, s, live, pend, fail)
                ON CONFLICT (namespace_id, robot_id, type, slot) DO UPDATE
                SET memories = c.memories + excluded.memories,
                    pending = c.pending + excluded.pending,
                    failed = c.failed + excluded.failed;
            END IF;
            INSERT INTO namespace_memory_count AS c
                (namespace_id, slot, memories, deleted, pending, failed, bytes)
            VALUES (p_ns, s, live, p_sign - live, pend, fail, p_sign * p_bytes)
            ON CONFLICT (namespace_id, slot) DO UPDATE
            SET memories = c.memories + excluded.memories,
                deleted = c.deleted + excluded.deleted,
                pending = c.pending + excluded.pending,
                failed = c.failed + excluded.failed,
                bytes = c.bytes + excluded.bytes;
        END $$""")
    op.execute(f"""
        CREATE FUNCTION memory_count_old() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            stored bigint;
        BEGIN
            SELECT {_BYTES} INTO stored FROM memory
            WHERE id = OLD.id AND created_at = OLD.created_at;
            PERFORM memory_count_apply(OLD.namespace_id, OLD.author_robot_id, OLD.type,
                                       OLD.deleted_at IS NOT NULL, OLD.embedding_status,
                                       coalesce(stored, 0), -1);
            IF TG_OP = 'DELETE' THEN
                RETURN OLD;
            END IF;
            RETURN NEW;
        END $$""")
    op.execute(f"""
        CREATE FUNCTION memory_count_new() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            stored bigint;
        BEGIN
            SELECT {_BYTES} INTO stored FROM memory
            WHERE id = NEW.id AND created_at = NEW.created_at;
            PERFORM memory_count_apply(NEW.namespace_id, NEW.author_robot_id, NEW.type,
                                       NEW.deleted_at IS NOT NULL, NEW.embedding_status,
                                       coalesce(stored, 0), 1);
            RETURN NULL;
        END $$""")
    op.execute(f"""
        CREATE TRIGGER memory_count_old BEFORE DELETE OR UPDATE OF {_COUNTED_COLUMNS}
            ON memory FOR EACH ROW EXECUTE FUNCTION memory_count_old()""")
    op.execute(f"""
        CREATE TRIGGER memory_count_new AFTER INSERT OR UPDATE OF {_COUNTED_COLUMNS}
            ON memory FOR EACH ROW EXECUTE FUNCTION memory_count_new()""")

    op.execute("""
        CREATE FUNCTION robot_activity_apply(
            p_robot bigint, p_at timestamptz, p_kind text, p_sign integer
        ) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO robot_activity_day AS c
                (robot_id, day, slot, adds, recalls, evictions, other)
            VALUES (p_robot, (p_at AT TIME ZONE 'UTC')::date, memory_count_slot(),
                    CASE WHEN p_kind = 'add' THEN p_sign ELSE 0 END,
                    CASE WHEN p_kind = 'recall' THEN p_sign ELSE 0 END,
                    CASE WHEN p_kind = 'evict' THEN p_sign ELSE 0 END,
                    CASE WHEN p_kind IN ('add', 'recall', 'evict') THEN 0 ELSE p_sign END)
            ON CONFLICT (robot_id, day, slot) DO UPDATE
            SET adds = c.adds + excluded.adds,
                recalls = c.recalls + excluded.recalls,
                evictions = c.evictions + excluded.evictions,
                other = c.other + excluded.other;
        END $$""")
    op.execute("""
        CREATE FUNCTION robot_activity_count() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'INSERT' AND OLD.robot_id IS NOT NULL THEN
                PERFORM robot_activity_apply(OLD.robot_id, OLD.at, OLD.kind, -1);
            END IF;
            IF TG_OP <> 'DELETE' AND NEW.robot_id IS NOT NULL THEN
                PERFORM robot_activity_apply(NEW.robot_id, NEW.at, NEW.kind, 1);
            END IF;
            RETURN NULL;
        END $$""")
    op.execute("""
        CREATE TRIGGER robot_activity_count AFTER INSERT OR UPDATE OR DELETE ON memory_event
            FOR EACH ROW EXECUTE FUNCTION robot_activity_count()""")

    op.execute(f"""
        CREATE FUNCTION memory_count_rebuild() RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            -- Writers wait until the counts are rebuilt and committed: none is missed or
            -- counted twice.
            LOCK TABLE memory, memory_event IN SHARE MODE;
            DELETE FROM robot_memory_count;
            DELETE FROM namespace_memory_count;
            DELETE FROM robot_activity_day;
            INSERT INTO robot_memory_count
                (namespace_id, robot_id, type, slot, memories, pending, failed)
            SELECT namespace_id, author_robot_id, type, 0, count(*),
                   count(*) FILTER (WHERE embedding_status = 'pending'),
                   count(*) FILTER (WHERE embedding_status = 'failed')
            FROM memory WHERE deleted_at IS NULL
            GROUP BY 1, 2, 3;
            INSERT INTO namespace_memory_count
                (namespace_id, slot, memories, deleted, pending, failed, bytes)
            SELECT namespace_id, 0,
                   count(*) FILTER (WHERE deleted_at IS NULL),
                   count(*) FILTER (WHERE deleted_at IS NOT NULL),
                   count(*) FILTER (WHERE deleted_at IS NULL AND embedding_status = 'pending'),
                   count(*) FILTER (WHERE deleted_at IS NULL AND embedding_status = 'failed'),
                   coalesce(sum({_BYTES}), 0)
            FROM memory
            GROUP BY 1;
            INSERT INTO robot_activity_day
                (robot_id, day, slot, adds, recalls, evictions, other)
            SELECT robot_id, (at AT TIME ZONE 'UTC')::date, 0,
                   count(*) FILTER (WHERE kind = 'add'),
                   count(*) FILTER (WHERE kind = 'recall'),
                   count(*) FILTER (WHERE kind = 'evict'),
                   count(*) FILTER (WHERE kind NOT IN ('add', 'recall', 'evict'))
            FROM memory_event WHERE robot_id IS NOT NULL
            GROUP BY 1, 2;
        END $$""")
    op.execute("SELECT memory_count_rebuild()")


def downgrade() -> None:
    op.execute("DROP TRIGGER robot_activity_count ON memory_event")
    op.execute("DROP TRIGGER memory_count_new ON memory")
    op.execute("DROP TRIGGER memory_count_old ON memory")
    for function in (
        "memory_count_rebuild()",
        "robot_activity_count()",
        "robot_activity_apply(bigint, timestamptz, text, integer)",
        "memory_count_new()",
        "memory_count_old()",
        "memory_count_apply(bigint, bigint, text, boolean, text, bigint, integer)",
        "memory_count_slot()",
    ):
        op.execute(f"DROP FUNCTION {function}")
    for table in ("robot_activity_day", "namespace_memory_count", "robot_memory_count"):
        op.execute(f"DROP TABLE {table}")
