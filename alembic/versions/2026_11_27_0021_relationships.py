"""Relationships between memories (issue 35, item 5): `memory_link`, one row per directed
edge, and the row trigger that keeps the edges the service derives itself.

- `memory_link (source_id, target_id, type)`: `type` is related_to, supports, contradicts,
  derived_from or supersedes; `origin` says who made it: `explicit` (POST …/links), `tags`
  (co-occurrence), `supersede` (memory.superseded_by) or `derived` (an enrichment
  proposition's `metadata.source_id`, a summary's `metadata.summary_of` keys). Keyed to
  memory_key(memory_id) like memory_version: a memory keeps that id for life (a move changes
  only its created_at) and a hard delete removes it, and every edge with it. Both directions
  indexed: reads walk edges either way (app/relationships/repository.py).
- `memory_link_sync()`, an AFTER row trigger on memory (like 0004's counts: every statement
  that writes a memory, single or batch add, PUT, PATCH, the enrichment's tag merge, a move,
  a soft delete, a restore, a supersede, without the service calling anything):
  - on insert: the `derived` edges its metadata names, in its namespace;
  - when `superseded_by` is set: `<new> supersedes <old>`;
  - on insert, and when its tags change or it stops or starts being current (not deleted,
    not superseded): its own `tags` edges recomputed: deleted, then one `related_to` edge to
    each of the 50 current memories of its namespace with the highest Jaccard similarity of
    their tags (ties: the newer memory, the higher id). A memory that is not current has no
    edges of its own. Only the written memory's own edges are touched (no other row is
    locked, so two writes never wait on each other's edges): another memory's edge to it
    keeps the weight computed when that one was written, which is why reads take a `tags`
    edge's weight from both memories' tags as they are now, and drop it at 0.
- `namespace_tags(namespace_id, tags)`: each tag prefixed by its namespace, and its GIN index
  `memory_namespace_tags`, partial on the current memories: the trigger's candidates are the
  memories sharing a tag in the same namespace, whatever other namespaces hold (0006's
  `memory_tag_paths` would return every namespace's rows with a common tag).
- `tag_jaccard(a, b)`: |a ∩ b| / |a ∪ b| over distinct tags (NULL for a NULL argument).

The existing memories get their edges here, as the trigger would have made them.

Revision ID: 0021
Revises: 0019
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The most `tags` edges one memory keeps.
TAG_EDGES = 50

# A memory's own tag edges, for the memory `{row}` (NEW in the trigger, a row in the backfill).
_TAG_EDGES = f"""
    SELECT {{row}}.namespace_id, {{row}}.id, c.id, 'related_to', c.weight, 'tags', now()
    FROM (
        SELECT o.id, tag_jaccard({{row}}.tags, o.tags) AS weight
        FROM memory o
        WHERE namespace_tags(o.namespace_id, o.tags)
                  && namespace_tags({{row}}.namespace_id, {{row}}.tags)
          AND o.deleted_at IS NULL AND o.superseded_by IS NULL
          AND o.namespace_id = {{row}}.namespace_id AND o.id <> {{row}}.id
    ) c
    WHERE c.weight > 0
    ORDER BY c.weight DESC, c.id DESC
    LIMIT {TAG_EDGES}"""

# The memories a memory's metadata says it was derived from, in its namespace.
_DERIVED = """
    SELECT {row}.namespace_id, {row}.id, k.memory_id, 'derived_from', 1, 'derived', now()
    FROM memory_key k
    WHERE k.namespace_id = {row}.namespace_id AND k.memory_id <> {row}.id
      AND (k.memory_id::text = {row}.metadata ->> 'source_id'
           OR (jsonb_typeof({row}.metadata -> 'summary_of') = 'array'
               AND k.key IN (SELECT jsonb_array_elements_text({row}.metadata -> 'summary_of'))))"""

_COLUMNS = "(namespace_id, source_id, target_id, type, weight, origin, created_at)"


def upgrade() -> None:
    op.execute("""
        CREATE TABLE memory_link (
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            source_id bigint NOT NULL REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            target_id bigint NOT NULL REFERENCES memory_key(memory_id) ON DELETE CASCADE,
            type varchar(16) NOT NULL CHECK (type IN
                ('related_to', 'supports', 'contradicts', 'derived_from', 'supersedes')),
            weight double precision NOT NULL CHECK (weight > 0 AND weight <= 1),
            origin varchar(16) NOT NULL CHECK (origin IN
                ('tags', 'explicit', 'supersede', 'derived')),
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (source_id, target_id, type),
            CHECK (source_id <> target_id)
        )""")
    op.execute("CREATE INDEX memory_link_target ON memory_link (target_id, source_id)")
    op.execute("""
        CREATE FUNCTION tag_jaccard(a text[], b text[]) RETURNS double precision
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT CASE WHEN u.n = 0 THEN 0 ELSE i.n::float8 / u.n END
            FROM (SELECT count(*) AS n FROM (SELECT unnest(a) INTERSECT SELECT unnest(b)) x) i,
                 (SELECT count(*) AS n FROM (SELECT unnest(a) UNION SELECT unnest(b)) y) u
        $$""")
    op.execute("""
        CREATE FUNCTION namespace_tags(namespace_id bigint, tags text[]) RETURNS text[]
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
            SELECT coalesce(array_agg(DISTINCT namespace_id::text || '/' || t), '{}')
            FROM unnest(tags) AS t
        $$""")
    op.execute("""
        CREATE INDEX memory_namespace_tags ON memory
        USING gin (namespace_tags(namespace_id, tags))
        WHERE deleted_at IS NULL AND superseded_by IS NULL""")
    op.execute(f"""
        CREATE FUNCTION memory_link_sync() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                INSERT INTO memory_link {_COLUMNS}
                {_DERIVED.format(row="NEW")}
                ON CONFLICT DO NOTHING;
            END IF;
            IF TG_OP = 'UPDATE' AND NEW.superseded_by IS NOT NULL
               AND NEW.superseded_by IS DISTINCT FROM OLD.superseded_by THEN
                INSERT INTO memory_link {_COLUMNS}
                SELECT NEW.namespace_id, k.memory_id, NEW.id, 'supersedes', 1, 'supersede', now()
                FROM memory_key k WHERE k.memory_id = NEW.superseded_by
                ON CONFLICT DO NOTHING;
            END IF;
            IF TG_OP = 'INSERT'
               OR NEW.tags IS DISTINCT FROM OLD.tags
               OR (NEW.deleted_at IS NULL) <> (OLD.deleted_at IS NULL)
               OR (NEW.superseded_by IS NULL) <> (OLD.superseded_by IS NULL) THEN
                DELETE FROM memory_link WHERE source_id = NEW.id AND origin = 'tags';
                IF NEW.deleted_at IS NULL AND NEW.superseded_by IS NULL THEN
                    INSERT INTO memory_link {_COLUMNS}
                    {_TAG_EDGES.format(row="NEW")}
                    ON CONFLICT (source_id, target_id, type) DO NOTHING;
                END IF;
            END IF;
            RETURN NULL;
        END
        $$""")
    op.execute("""
        CREATE TRIGGER memory_link_inserted AFTER INSERT ON memory
        FOR EACH ROW EXECUTE FUNCTION memory_link_sync()""")
    op.execute("""
        CREATE TRIGGER memory_link_updated AFTER UPDATE OF tags, deleted_at, superseded_by
        ON memory FOR EACH ROW
        WHEN (NEW.tags IS DISTINCT FROM OLD.tags
              OR (NEW.deleted_at IS NULL) <> (OLD.deleted_at IS NULL)
              OR NEW.superseded_by IS DISTINCT FROM OLD.superseded_by)
        EXECUTE FUNCTION memory_link_sync()""")
    # The existing memories' edges, as the trigger makes them.
    op.execute(f"""
        INSERT INTO memory_link {_COLUMNS}
        SELECT m.namespace_id, m.superseded_by, m.id, 'supersedes', 1, 'supersede', now()
        FROM memory m JOIN memory_key k ON k.memory_id = m.superseded_by
        ON CONFLICT DO NOTHING""")
    op.execute(f"""
        INSERT INTO memory_link {_COLUMNS}
        SELECT d.* FROM memory m CROSS JOIN LATERAL ({_DERIVED.format(row="m")}) d
        WHERE m.metadata ?| array['source_id', 'summary_of']
        ON CONFLICT DO NOTHING""")
    op.execute(f"""
        INSERT INTO memory_link {_COLUMNS}
        SELECT e.* FROM memory m CROSS JOIN LATERAL ({_TAG_EDGES.format(row="m")}) e
        WHERE m.deleted_at IS NULL AND m.superseded_by IS NULL AND cardinality(m.tags) > 0
        ON CONFLICT DO NOTHING""")


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_link_updated ON memory")
    op.execute("DROP TRIGGER memory_link_inserted ON memory")
    op.execute("DROP FUNCTION memory_link_sync()")
    op.execute("DROP INDEX memory_namespace_tags")
    op.execute("DROP FUNCTION namespace_tags(bigint, text[])")
    op.execute("DROP FUNCTION tag_jaccard(text[], text[])")
    op.execute("DROP TABLE memory_link")
