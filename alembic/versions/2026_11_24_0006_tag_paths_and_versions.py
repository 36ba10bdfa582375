"""Hierarchical tags and memory versions (issue 18).

- tag_paths(tags): every tag and each of its ancestors at `:` boundaries, once
  (`{db:pg:tuning}` → `{db, db:pg, db:pg:tuning}`). A filter tag matches a memory when it is
  one of these paths, so `db` matches `db` and `db:pg:tuning` but never `dbs`: tag filters
  are `tag_paths(m.tags) && filters` (any) and `@> filters` (all), served by the GIN
  expression index memory_tag_paths, which replaces 0003's memory_tags (no query uses plain
  `tags` containment any more). An expression index rather than a stored column: adding a
  stored column rewrites the table and rebuilds its HNSW index. The function is plain SQL
  with a FROM clause, so the planner never inlines it and queries match the index's
  expression as written.
- memory.changed_by_robot_id / memory.changed_at: who wrote the current version and when
  (NULL: version 1, by its author, at created_at). Nullable without default: no rewrite.
- memory_version: the earlier versions of a memory, one row per replaced version (its
  fields, its embedding's status and model but not the vector, who wrote it and when), copied
  in the transaction of the replace that supersedes it. Keyed to memory_key(memory_id),
  which a memory keeps for life (a move changes only its created_at) and which a hard
  delete removes: every version goes with it. Versions
  replaced before this migration were not kept.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("""
        CREATE FUNCTION tag_paths(tags text[]) RETURNS text[]
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT coalesce(array_agg(DISTINCT array_to_string(s[1:n], ':')), '{}')
            FROM unnest(tags) AS t(tag),
                 LATERAL string_to_array(t.tag, ':') AS s,
                 LATERAL generate_series(1, cardinality(s)) AS n
        $$""")
    op.execute("DROP INDEX memory_tags")
    op.execute("CREATE INDEX memory_tag_paths ON memory USING gin (tag_paths(tags))")
    op.execute("""
        ALTER TABLE memory ADD COLUMN changed_by_robot_id bigint,
                           ADD COLUMN changed_at timestamptz""")
    op.execute("""
        CREATE TABLE memory_version (
            memory_id            bigint NOT NULL
                                 REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            version              integer NOT NULL,
            content              text NOT NULL,
            type                 varchar(32) NOT NULL,
            importance           double precision NOT NULL,
            tags                 text[] NOT NULL,
            metadata             jsonb NOT NULL,
            created_at           timestamptz NOT NULL,
            token_count          integer NOT NULL,
            embedding_status     varchar(16) NOT NULL,
            embedding_model      varchar(200),
            changed_by_robot_id  bigint,
            changed_at           timestamptz NOT NULL,
            PRIMARY KEY (memory_id, version)
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE memory_version")
    op.execute("ALTER TABLE memory DROP COLUMN changed_by_robot_id, DROP COLUMN changed_at")
    op.execute("DROP INDEX memory_tag_paths")
    op.execute("CREATE INDEX memory_tags ON memory USING gin (tags)")
    op.execute("DROP FUNCTION tag_paths(text[])")
