"""Initial schema: namespaces, robots, memories, keys, working-memory membership, events, API keys.

The vector dimension and the hypertable chunk interval come from Settings at migration time.
TimescaleDB is used when the extension can be created (it must be in shared_preload_libraries);
otherwise the same tables stay plain. Which one is in use is recorded by the catalog itself
(timescaledb_information.hypertables), so the service detects it instead of guessing.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.config import get_settings

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _try_timescaledb() -> bool:
    bind = op.get_bind()
    available = bind.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'")
    ).scalar()
    # The extension can only be created when its loader is preloaded, and CREATE EXTENSION
    # without it fails with FATAL, which ends the connection (no savepoint survives that).
    # The preloaded loader defines this setting; any role can read it.
    preloaded = bind.execute(
        text("SELECT current_setting('timescaledb.max_background_workers', true) IS NOT NULL")
    ).scalar()
    if not available or not preloaded:
        return False
    # CREATE EXTENSION fails when timescaledb is not preloaded; a savepoint keeps the
    # migration's transaction usable so we fall back to plain tables.
    savepoint = bind.begin_nested()
    try:
        bind.execute(text("CREATE EXTENSION IF NOT EXISTS timescaledb"))
        savepoint.commit()
        return True
    except Exception:
        savepoint.rollback()
        return False


def upgrade() -> None:
    settings = get_settings()
    dim = int(settings.embedding_dimension)
    chunk = settings.hypertable_chunk_interval

    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    timescale = _try_timescaledb()

    op.execute("""
        CREATE TABLE namespace (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name        varchar(64) NOT NULL UNIQUE,
            created_at  timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("""
        CREATE TABLE robot (
            id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            namespace_id           bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            name                   varchar(64) NOT NULL,
            working_memory_budget  integer CHECK (working_memory_budget > 0),
            created_at             timestamptz NOT NULL DEFAULT now(),
            last_seen_at           timestamptz NOT NULL DEFAULT now(),
            UNIQUE (namespace_id, name)
        )""")

    op.execute("CREATE SEQUENCE memory_id_seq")
    op.execute(f"""
        CREATE TABLE memory (
            id                  bigint NOT NULL DEFAULT nextval('memory_id_seq'),
            created_at          timestamptz NOT NULL DEFAULT now(),
            namespace_id        bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            key                 varchar(128) NOT NULL,
            content             text NOT NULL,
            type                varchar(32) NOT NULL DEFAULT 'fact',
            importance          double precision NOT NULL DEFAULT 1
                                CHECK (importance >= 0 AND importance <= 10),
            tags                text[] NOT NULL DEFAULT '{{}}',
            metadata            jsonb NOT NULL DEFAULT '{{}}',
            author_robot_id     bigint NOT NULL REFERENCES robot(id) ON DELETE CASCADE,
            token_count         integer NOT NULL,
            embedding           vector({dim}),
            embedding_model     varchar(200),
            embedding_status    varchar(16) NOT NULL DEFAULT 'pending'
                                CHECK (embedding_status IN ('ready', 'pending')),
            embedding_attempts  integer NOT NULL DEFAULT 0,
            embedding_next_at   timestamptz,
            embedding_error     text,
            updated_at          timestamptz NOT NULL DEFAULT now(),
            deleted_at          timestamptz,
            content_tsv         tsvector GENERATED ALWAYS AS
                                (to_tsvector('english'::regconfig, content)) STORED,
            PRIMARY KEY (id, created_at)
        )""")
    op.execute("""
        CREATE TABLE memory_key (
            namespace_id       bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            key                varchar(128) NOT NULL,
            memory_id          bigint NOT NULL UNIQUE,
            memory_created_at  timestamptz NOT NULL,
            PRIMARY KEY (namespace_id, key)
        )""")
    op.execute("""
        CREATE TABLE working_memory_item (
            robot_id           bigint NOT NULL REFERENCES robot(id) ON DELETE CASCADE,
            memory_id          bigint NOT NULL,
            memory_created_at  timestamptz NOT NULL,
            in_working_memory  boolean NOT NULL,
            seq                bigint NOT NULL,
            added_at           timestamptz NOT NULL,
            last_access_at     timestamptz NOT NULL,
            from_recall        boolean NOT NULL DEFAULT false,
            PRIMARY KEY (robot_id, memory_id)
        )""")
    op.execute("""
        CREATE INDEX working_memory_item_members
            ON working_memory_item (robot_id) WHERE in_working_memory""")
    op.execute("""
        CREATE TABLE memory_event (
            id            bigint GENERATED ALWAYS AS IDENTITY,
            at            timestamptz NOT NULL DEFAULT now(),
            namespace_id  bigint NOT NULL,
            robot_id      bigint,
            memory_id     bigint,
            kind          varchar(16) NOT NULL
                          CHECK (kind IN ('add', 'recall', 'evict', 'forget', 'restore', 'access')),
            detail        jsonb NOT NULL DEFAULT '{}',
            PRIMARY KEY (id, at)
        )""")
    op.execute("""
        CREATE TABLE api_key (
            id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            namespace_id  bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            name          varchar(100) NOT NULL,
            role          varchar(16) NOT NULL CHECK (role IN ('admin', 'writer', 'reader')),
            key_hash      bytea NOT NULL UNIQUE,
            prefix        varchar(16) NOT NULL,
            created_at    timestamptz NOT NULL DEFAULT now(),
            revoked_at    timestamptz,
            last_used_at  timestamptz
        )""")

    if timescale:
        # Hypertables before indexes, so every chunk gets them. create_default_indexes is off:
        # the (namespace, created_at) btree below serves the same purpose.
        for table, column in (("memory", "created_at"), ("memory_event", "at")):
            op.execute(
                f"SELECT create_hypertable('{table}', by_range('{column}', "
                f"INTERVAL '{chunk}'), create_default_indexes => false)"
            )

    op.execute("CREATE INDEX memory_namespace_created ON memory (namespace_id, created_at DESC)")
    op.execute("CREATE INDEX memory_author_created ON memory (author_robot_id, created_at DESC)")
    op.execute("""
        CREATE INDEX memory_embedding_hnsw ON memory
            USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)""")
    op.execute("CREATE INDEX memory_content_tsv ON memory USING gin (content_tsv)")
    op.execute("""
        CREATE INDEX memory_pending_embedding ON memory (embedding_next_at)
            WHERE embedding_status = 'pending'""")
    op.execute("CREATE INDEX memory_event_namespace_at ON memory_event (namespace_id, at DESC)")
    op.execute("CREATE INDEX memory_event_robot_at ON memory_event (robot_id, at DESC)")


def downgrade() -> None:
    # Extensions stay: other databases objects may use them, and dropping is not reversible.
    for table in (
        "api_key",
        "memory_event",
        "working_memory_item",
        "memory_key",
        "memory",
        "robot",
        "namespace",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP SEQUENCE IF EXISTS memory_id_seq")
