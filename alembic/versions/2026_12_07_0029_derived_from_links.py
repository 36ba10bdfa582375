"""Facts extracted from conversations link to their turns (issue 47, item 3).

A memory whose metadata names `derived_from` (an array of keys: a fact's turns, written by
app/facts/service.py) gets one `derived_from` edge to each of those memories in its
namespace, `origin` 'derived', as 0023's trigger does for a proposition's `source_id` and a
summary's `summary_of`. A trigger of its own, fired only when the metadata has the key (the
WHEN clause: other inserts pay nothing), rather than a new version of 0023's function. Edges
of memories already carrying `derived_from` are backfilled.

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EDGES = """
    SELECT {row}.namespace_id, {row}.id, k.memory_id, 'derived_from', 1, 'derived', now()
    FROM memory_key k
    WHERE k.namespace_id = {row}.namespace_id AND k.memory_id <> {row}.id
      AND k.key = ANY(ARRAY(
          SELECT jsonb_array_elements_text({row}.metadata -> 'derived_from')
          WHERE jsonb_typeof({row}.metadata -> 'derived_from') = 'array'))"""
_COLUMNS = "(namespace_id, source_id, target_id, type, weight, origin, created_at)"


def upgrade() -> None:
    op.execute(f"""
        CREATE FUNCTION memory_link_derived_from() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_link {_COLUMNS}
            {_EDGES.format(row="NEW")}
            ON CONFLICT DO NOTHING;
            RETURN NULL;
        END
        $$""")
    op.execute("""
        CREATE TRIGGER memory_link_derived_from AFTER INSERT ON memory
        FOR EACH ROW WHEN (NEW.metadata ? 'derived_from')
        EXECUTE FUNCTION memory_link_derived_from()""")
    op.execute(f"""
        INSERT INTO memory_link {_COLUMNS}
        SELECT d.* FROM memory m CROSS JOIN LATERAL ({_EDGES.format(row="m")}) d
        WHERE m.metadata ? 'derived_from'
        ON CONFLICT DO NOTHING""")


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_link_derived_from ON memory")
    op.execute("DROP FUNCTION memory_link_derived_from()")
