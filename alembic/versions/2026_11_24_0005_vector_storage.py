"""Embeddings stored and indexed as HTM_VECTOR_STORAGE says: `vector` (float32, what 0001
created) or `halfvec` (float16: half the bytes per vector and a smaller HNSW index;
pgvector >= 0.7). `auto` (the default) is halfvec for a table with no rows yet on a
pgvector that has it, and otherwise leaves the column as it is, so upgrading a database
full of memories never rewrites it unasked. Read at migration time, like
HTM_EMBEDDING_DIMENSION; the service reads the column's type from the catalog
(app/db/vectors.py), so a database keeps the storage it was migrated with whatever the
service's environment says later.

To change an existing database's storage, downgrade to 0004 (back to `vector`) and upgrade
with the other setting. Either way the table is rewritten and the HNSW index rebuilt under
an ACCESS EXCLUSIVE lock: minutes at a million memories, so stop the service first.

The counting triggers of 0004 name `embedding` in their UPDATE OF list, and PostgreSQL will
not change the type of a column a trigger names: they are dropped and created again from
their own definitions. The counted bytes change with the type, so the counts are rebuilt.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.config import get_settings

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMN = """
    SELECT t.typname, a.atttypmod, a.attnum
    FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = 'memory'::regclass AND a.attname = 'embedding'"""


def _resolve(setting: str) -> str | None:
    """The storage `setting` asks for; for `auto`, halfvec on an empty table where pgvector
    has it, else None (leave the column as it is)."""
    if setting != "auto":
        return setting
    bind = op.get_bind()
    has_rows = bind.execute(text("SELECT EXISTS (SELECT 1 FROM memory)")).scalar()
    has_halfvec = bind.execute(text("SELECT to_regtype('halfvec') IS NOT NULL")).scalar()
    return "halfvec" if has_halfvec and not has_rows else None


def _store_as(storage: str | None) -> None:
    if storage is None:
        return
    if storage not in ("vector", "halfvec"):
        raise SystemExit(f"HTM_VECTOR_STORAGE must be vector or halfvec, not {storage!r}")
    bind = op.get_bind()
    current, dim, attnum = bind.execute(text(_COLUMN)).one()
    if current == storage:
        return
    if storage == "halfvec" and not bind.execute(text("SELECT to_regtype('halfvec')")).scalar():
        version = bind.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        ).scalar()
        raise SystemExit(
            f"HTM_VECTOR_STORAGE=halfvec needs pgvector >= 0.7 (this database has {version}): "
            "ALTER EXTENSION vector UPDATE, or migrate with HTM_VECTOR_STORAGE=vector"
        )
    triggers = bind.execute(
        text("""
            SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
            WHERE tgrelid = 'memory'::regclass AND NOT tgisinternal
              AND CAST(:attnum AS int2) = ANY(CAST(tgattr AS int2[]))"""),
        {"attnum": attnum},
    ).all()
    for name, _ in triggers:
        op.execute(f"DROP TRIGGER {name} ON memory")
    op.execute("DROP INDEX memory_embedding_hnsw")
    op.execute(f"""
        ALTER TABLE memory ALTER COLUMN embedding TYPE {storage}({dim})
            USING CAST(embedding AS {storage}({dim}))""")
    op.execute(f"""
        CREATE INDEX memory_embedding_hnsw ON memory
            USING hnsw (embedding {storage}_cosine_ops) WITH (m = 16, ef_construction = 64)""")
    for _, definition in triggers:
        op.execute(definition)
    op.execute("SELECT memory_count_rebuild()")


def upgrade() -> None:
    _store_as(_resolve(get_settings().vector_storage))


def downgrade() -> None:
    _store_as("vector")
