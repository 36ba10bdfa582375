"""Search text apart from content, speakers, and a conversation's turns in order (issue 31).

- `memory.search_text`: what recall searches when it is not the content itself (NULL: the
  content). Built by app/memories/search_text.py from a memory and its context (its date in
  words, its speaker, the turn before it in its session) for conversation memories; `content`
  stays exactly what the client stored and is all that recall, context and prompts return.
- `memory.search_tsv` replaces `content_tsv`: the full-text column is generated from
  `coalesce(search_text, content)`, so both of recall's lists read the same text. Replacing a
  generated column rewrites the table once (a few seconds per 100,000 memories).
- `speaker`: the speakers a namespace's memories name (metadata `speaker`), so that recall
  can tell a name in a question from other words without scanning memories.
- `memory_session_turns`: a session's turns in order (metadata `session`), to find the turn
  before a new one and the neighbours of a hit.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory ADD COLUMN search_text text")
    op.execute("ALTER TABLE memory DROP COLUMN content_tsv")  # and its index
    op.execute(
        "ALTER TABLE memory ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS "
        "(to_tsvector('english'::regconfig, coalesce(search_text, content))) STORED"
    )
    op.execute("CREATE INDEX memory_search_tsv ON memory USING gin (search_tsv)")
    op.execute(
        "CREATE INDEX memory_session_turns ON memory "
        "(namespace_id, (metadata ->> 'session'), created_at) WHERE metadata ? 'session'"
    )
    op.execute("""
        CREATE TABLE speaker (
            namespace_id bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            name text NOT NULL,
            PRIMARY KEY (namespace_id, name)
        )""")
    op.execute("""
        INSERT INTO speaker (namespace_id, name)
        SELECT DISTINCT namespace_id, metadata ->> 'speaker' FROM memory
        WHERE metadata ? 'speaker' AND jsonb_typeof(metadata -> 'speaker') = 'string'
          AND length(metadata ->> 'speaker') BETWEEN 1 AND 100
        ON CONFLICT DO NOTHING""")


def downgrade() -> None:
    op.execute("DROP TABLE speaker")
    op.execute("DROP INDEX memory_session_turns")
    op.execute("ALTER TABLE memory DROP COLUMN search_tsv")
    op.execute(
        "ALTER TABLE memory ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS "
        "(to_tsvector('english'::regconfig, content)) STORED"
    )
    op.execute("CREATE INDEX memory_content_tsv ON memory USING gin (content_tsv)")
    op.execute("ALTER TABLE memory DROP COLUMN search_text")
