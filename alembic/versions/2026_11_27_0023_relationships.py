"""Relationships between memories (issue 35, item 5): `memory_link`, one row per directed
edge, and the row trigger that keeps the edges the service derives itself.

- `memory_link (source_id, target_id, type)`: `type` is related_to, supports, contradicts,
  derived_from or supersedes; `origin` says who made it: `explicit` (POST …/links), `tags`
  (co-occurrence), `supersede` (memory.superseded_by) or `derived` (an enrichment
  proposition's `metadata.source_id`, a summary's `metadata.summary_of` keys). Its ids are
  memory_key's memory_id, which a memory keeps for life (a move changes only its
  created_at); a hard delete removes that row, and `memory_link_forget()` (a row trigger on
  memory_key) every edge and tag of it. A trigger rather than foreign keys: a memory writes
  up to 50 edges, and three foreign-key checks each doubled the cost of an add. Both
  directions indexed: reads walk edges either way (app/relationships/repository.py).
- `memory_link_sync()`, an AFTER row trigger on memory (like 0004's counts: every statement
  that writes a memory, single or batch add, PUT, PATCH, the enrichment's tag merge, a move,
  a soft delete, a restore, a supersede, without the service calling anything):
  - on insert: the `derived` edges its metadata names, in its namespace;
  - when `superseded_by` is set: `<new> supersedes <old>` (dropped when a PUT makes the old
    one current again);
  - on insert, and when its tags change or it stops or starts being current (not deleted,
    not superseded): its own `tags` edges recomputed: deleted, then one `related_to` edge to
    each of the 50 current memories of its namespace (among its candidates, below) with the
    highest Jaccard similarity of their tags (ties: the newer memory, the higher id). A
    memory that is not current has no edges of its own. Only the written memory's own edges
    are touched (no other row is locked, so two writes never wait on each other's edges):
    another memory's edge to it keeps the weight computed when that one was written, which
    is why reads take a `tags` edge's weight from both memories' tags as they are now, and
    drop it at 0.
- `memory_tag (namespace_id, tag, memory_id)`: the distinct tags of the current memories,
  kept by the same trigger. The candidates of a memory's tag edges are, for each of its tags,
  the `CANDIDATES_PER_TAG` newest current memories carrying it (one btree range each): a
  write costs at most that many lookups per tag however common a tag is (a speaker's tag is
  on every turn of theirs), and a memory is compared with the newest of a crowded tag only.
  In a batch, each memory sees those stored before it, as if added one by one.
- A tag rename (app/tags/repository.py) sets `htm.tag_rename` for its statement: each
  renamed memory's `memory_tag` rows follow, its edges stay (a consistent rename changes no
  similarity, a merge only some, and reads weigh tag edges by the tags as they are); one
  memory at a time, recomputing every carrier's edges took seconds per thousand.
- `tag_jaccard(a, b)`: |a ∩ b| / |a ∪ b| over distinct tags (NULL for a NULL argument), in
  PL/pgSQL over the arrays: no query per call, since reads compute it for every tag edge.

The existing memories get their supersede and derived-from edges here; their tag edges come
when each is next written (the backfill took minutes at 100,000 memories), and the memories
written after them link to them from the start.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The most `tags` edges one memory keeps.
TAG_EDGES = 50
# For each of a memory's tags, how many of the newest memories carrying it are compared.
CANDIDATES_PER_TAG = 50

# A memory's own tag edges, for the memory `{row}` (NEW in the trigger, a row in the backfill).
_TAG_EDGES = f"""
    SELECT {{row}}.namespace_id, {{row}}.id, c.id, 'related_to', c.weight, 'tags', now()
    FROM (
        SELECT o.id, tag_jaccard({{row}}.tags, o.tags) AS weight
        FROM (
            SELECT DISTINCT x.memory_id
            FROM unnest({{row}}.tags) AS t(tag)
            CROSS JOIN LATERAL (
                SELECT mt.memory_id FROM memory_tag mt
                WHERE mt.namespace_id = {{row}}.namespace_id AND mt.tag = t.tag
                  AND mt.memory_id <> {{row}}.id
                ORDER BY mt.memory_id DESC
                LIMIT {CANDIDATES_PER_TAG}
            ) x
        ) c
        JOIN memory_key k ON k.memory_id = c.memory_id
        JOIN memory o ON o.id = k.memory_id AND o.created_at = k.memory_created_at
    ) c
    WHERE c.weight > 0
    ORDER BY c.weight DESC, c.id DESC
    LIMIT {TAG_EDGES}"""

# The memories a memory's metadata says it was derived from, in its namespace: each found
# by an index (memory_key's memory_id, its (namespace_id, key)).
_DERIVED = """
    SELECT {row}.namespace_id, {row}.id, k.memory_id, 'derived_from', 1, 'derived', now()
    FROM memory_key k
    WHERE k.memory_id = CASE WHEN {row}.metadata ->> 'source_id' ~ '^[0-9]{{1,18}}$'
                             THEN CAST({row}.metadata ->> 'source_id' AS bigint) END
      AND k.namespace_id = {row}.namespace_id AND k.memory_id <> {row}.id
    UNION ALL
    SELECT {row}.namespace_id, {row}.id, k.memory_id, 'derived_from', 1, 'derived', now()
    FROM memory_key k
    WHERE k.namespace_id = {row}.namespace_id AND k.memory_id <> {row}.id
      AND k.key = ANY(ARRAY(
          SELECT jsonb_array_elements_text({row}.metadata -> 'summary_of')
          WHERE jsonb_typeof({row}.metadata -> 'summary_of') = 'array'))"""

_COLUMNS = "(namespace_id, source_id, target_id, type, weight, origin, created_at)"


def upgrade() -> None:
    op.execute("""
        CREATE TABLE memory_link (
            namespace_id bigint NOT NULL,
            source_id bigint NOT NULL,
            target_id bigint NOT NULL,
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
        CREATE TABLE memory_tag (
            namespace_id bigint NOT NULL,
            tag text NOT NULL,
            memory_id bigint NOT NULL,
            PRIMARY KEY (namespace_id, tag, memory_id)
        )""")
    op.execute("CREATE INDEX memory_tag_memory ON memory_tag (memory_id)")
    op.execute("""
        CREATE FUNCTION tag_jaccard(a text[], b text[]) RETURNS double precision
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        DECLARE
            n_a int := 0;
            n_b int := 0;
            shared int := 0;
        BEGIN
            FOR i IN 1 .. coalesce(array_length(a, 1), 0) LOOP
                IF i = 1 OR NOT (a[i] = ANY(a[1:i - 1])) THEN
                    n_a := n_a + 1;
                    IF a[i] = ANY(b) THEN
                        shared := shared + 1;
                    END IF;
                END IF;
            END LOOP;
            FOR i IN 1 .. coalesce(array_length(b, 1), 0) LOOP
                IF i = 1 OR NOT (b[i] = ANY(b[1:i - 1])) THEN
                    n_b := n_b + 1;
                END IF;
            END LOOP;
            IF n_a + n_b = 0 THEN
                RETURN 0;
            END IF;
            RETURN shared::float8 / (n_a + n_b - shared);
        END
        $$""")
    op.execute(f"""
        CREATE FUNCTION memory_link_sync() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            had_tags bigint;
            current boolean;
        BEGIN
            IF TG_OP = 'INSERT' AND NEW.metadata ?| array['source_id', 'summary_of'] THEN
                INSERT INTO memory_link {_COLUMNS}
                {_DERIVED.format(row="NEW")}
                ON CONFLICT DO NOTHING;
            END IF;
            IF TG_OP = 'UPDATE' AND OLD.superseded_by IS NOT NULL
               AND NEW.superseded_by IS DISTINCT FROM OLD.superseded_by THEN
                DELETE FROM memory_link
                WHERE source_id = OLD.superseded_by AND target_id = NEW.id
                  AND origin = 'supersede';
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
                -- Only a memory with tag rows has tag edges of its own (a new one has
                -- neither, unless it is a move: the same id, inserted again).
                DELETE FROM memory_tag WHERE memory_id = NEW.id;
                GET DIAGNOSTICS had_tags = ROW_COUNT;
                current := NEW.deleted_at IS NULL AND NEW.superseded_by IS NULL
                           AND cardinality(NEW.tags) > 0;
                IF current THEN
                    INSERT INTO memory_tag (namespace_id, tag, memory_id)
                    SELECT DISTINCT NEW.namespace_id, t, NEW.id FROM unnest(NEW.tags) AS t;
                END IF;
                IF TG_OP = 'UPDATE' AND current_setting('htm.tag_rename', true) = 'on' THEN
                    RETURN NULL;
                END IF;
                IF had_tags > 0 THEN
                    DELETE FROM memory_link WHERE source_id = NEW.id AND origin = 'tags';
                END IF;
                IF current THEN
                    INSERT INTO memory_link {_COLUMNS}
                    {_TAG_EDGES.format(row="NEW")}
                    ON CONFLICT (source_id, target_id, type) DO NOTHING;
                END IF;
            END IF;
            RETURN NULL;
        END
        $$""")
    op.execute("""
        CREATE FUNCTION memory_link_forget() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM memory_link WHERE source_id = OLD.memory_id;
            DELETE FROM memory_link WHERE target_id = OLD.memory_id;
            DELETE FROM memory_tag WHERE memory_id = OLD.memory_id;
            RETURN NULL;
        END
        $$""")
    op.execute("""
        CREATE TRIGGER memory_link_forgotten AFTER DELETE ON memory_key
        FOR EACH ROW EXECUTE FUNCTION memory_link_forget()""")
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
    # The existing memories' supersede and derived-from edges, and their tags' index. Their
    # tag edges are not made here: at 100,000 memories that took more than ten minutes (every
    # memory's candidates read and weighed), a migration every command waits for. A memory
    # stored before gets its own tag edges when it is next written (its tags, a PUT, a
    # restore), and is reached meanwhile by the edges of the memories written after it.
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
    op.execute("""
        INSERT INTO memory_tag (namespace_id, tag, memory_id)
        SELECT DISTINCT m.namespace_id, t, m.id FROM memory m CROSS JOIN unnest(m.tags) AS t
        WHERE m.deleted_at IS NULL AND m.superseded_by IS NULL""")


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_link_forgotten ON memory_key")
    op.execute("DROP FUNCTION memory_link_forget()")
    op.execute("DROP TRIGGER memory_link_updated ON memory")
    op.execute("DROP TRIGGER memory_link_inserted ON memory")
    op.execute("DROP FUNCTION memory_link_sync()")
    op.execute("DROP FUNCTION tag_jaccard(text[], text[])")
    op.execute("DROP TABLE memory_tag")
    op.execute("DROP TABLE memory_link")
