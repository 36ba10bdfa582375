"""A memory's `confidence` and `source` as columns (issue 47, item 5), and the feedback its
learned importance is made of (item 4).

- `memory.confidence`: how sure the writer is, in [0, 1]; NULL: not said.
- `memory.source`: where the memory came from, a short string ("user", "tool:web",
  "inference", "import"); NULL: not said.
- `memory_version` keeps both, so a version (and a read `as_of`) shows them as written then.

Both were free metadata before (`metadata.confidence`, `metadata.source`). The migration
**copies** a value that would pass the request's validation into the column (a number in
[0, 1]; a string of 1-100 characters matching `app.common.SOURCE_PATTERN`) and leaves the
metadata as it was: metadata is the client's own JSON, given back as written, and
`htm load` finds its chunks by `metadata.source` (app/transfer/load.py). Anything else
stays metadata only. Only the rows carrying one of the two keys are updated.

`memory_access` (0025: narrow, its updates heap-only) gains what feedback on a memory's use
taught (app/memories/learning.py): the composed steps `learn_scale`, `learn_shift` (the
learned importance is learn_scale·importance + learn_shift; 1 and 0: nothing learned) and how
many there were, `uses` and `misses`. Written by the access-count flush, off the request's
path, like the counts beside them.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# app.common.SOURCE_PATTERN (the same syntax in PostgreSQL). A CASE in a CASE: the cast is
# evaluated only for a JSON number (AND does not promise an order).
_SOURCE = r"^[A-Za-z0-9][A-Za-z0-9 ._:/@+-]{0,99}$"


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory
            ADD COLUMN confidence double precision,
            ADD COLUMN source text,
            ADD CONSTRAINT memory_confidence_check CHECK (confidence BETWEEN 0 AND 1),
            ADD CONSTRAINT memory_source_check CHECK (length(source) BETWEEN 1 AND 100)""")
    op.execute("""
        ALTER TABLE memory_version
            ADD COLUMN confidence double precision,
            ADD COLUMN source text""")
    op.execute(f"""
        UPDATE memory SET
            confidence = CASE WHEN jsonb_typeof(metadata -> 'confidence') = 'number' THEN
                CASE WHEN (metadata ->> 'confidence')::numeric BETWEEN 0 AND 1
                     THEN (metadata ->> 'confidence')::double precision END END,
            source = CASE WHEN jsonb_typeof(metadata -> 'source') = 'string' THEN
                CASE WHEN (metadata ->> 'source') ~ '{_SOURCE}' THEN metadata ->> 'source' END
                END
        WHERE metadata ?| ARRAY['confidence', 'source']""")
    op.execute("ANALYZE memory (confidence, source)")
    op.execute("""
        ALTER TABLE memory_access
            ADD COLUMN learn_scale double precision NOT NULL DEFAULT 1,
            ADD COLUMN learn_shift double precision NOT NULL DEFAULT 0,
            ADD COLUMN uses integer NOT NULL DEFAULT 0,
            ADD COLUMN misses integer NOT NULL DEFAULT 0""")


def downgrade() -> None:
    op.execute("""
        ALTER TABLE memory_access DROP COLUMN learn_scale, DROP COLUMN learn_shift,
                                  DROP COLUMN uses, DROP COLUMN misses""")
    op.execute("ALTER TABLE memory_version DROP COLUMN confidence, DROP COLUMN source")
    op.execute("ALTER TABLE memory DROP COLUMN confidence, DROP COLUMN source")
