"""Entities (issue 47): the people, names and codes each memory names, and a namespace's
aliases for them.

- `memory.entities`, `memory.entity_kinds`: parallel arrays, each memory's entity keys
  (normalised: case folded, possessive taken off) and their kinds (`person`, `name`,
  `code`), written by the add and the PUT statements (app/memories/repository.py) from the
  deterministic extractor (app/entities/extract.py), so in the write's own transaction for
  every way in. A column rather than a table of its own: a forget, a restore, a hard delete,
  a row moved by a new created_at and the visibility predicate all apply to it as to the
  memory's other fields, with nothing to keep in step.
- `memory_entities`: a GIN index on the keys, which an entity filter (`&&`) is planned on.
- `entity_alias`: a namespace's aliases, `alias` → `entity` (both keys). Applied when
  reading (app/entities/repository.py), so setting one takes effect for memories stored
  before it; an alias is never itself an entity of the map (no chains).

Existing memories are given their entities here, by the extractor as it is in this release,
a thousand rows per statement.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

import json
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.entities.extract import extract

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000


def upgrade() -> None:
    op.execute("""
        ALTER TABLE memory ADD COLUMN entities text[] NOT NULL DEFAULT '{}',
                           ADD COLUMN entity_kinds text[] NOT NULL DEFAULT '{}'""")
    op.execute("CREATE INDEX memory_entities ON memory USING gin (entities)")
    op.execute("""
        CREATE TABLE entity_alias (
            namespace_id  bigint NOT NULL REFERENCES namespace(id) ON DELETE CASCADE,
            alias         text NOT NULL,
            entity        text NOT NULL,
            PRIMARY KEY (namespace_id, alias),
            CHECK (alias <> entity)
        )""")
    _backfill()


def _backfill() -> None:
    bind = op.get_bind()
    after = 0
    while True:
        rows = bind.execute(
            text("""
                SELECT id, created_at, content, metadata FROM memory
                WHERE id > :after ORDER BY id LIMIT :n"""),
            {"after": after, "n": BATCH},
        ).all()
        if not rows:
            return
        found = [extract(r.content, r.metadata or {}) for r in rows]
        bind.execute(
            text("""
                UPDATE memory m
                SET entities = ARRAY(SELECT jsonb_array_elements_text(CAST(t.keys AS jsonb))),
                    entity_kinds = ARRAY(SELECT jsonb_array_elements_text(CAST(t.kinds AS jsonb)))
                FROM unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                            CAST(:keys AS text[]), CAST(:kinds AS text[]))
                     AS t(id, c, keys, kinds)
                WHERE m.id = t.id AND m.created_at = t.c AND t.keys <> '[]'"""),
            {
                "ids": [r.id for r in rows],
                "cs": [r.created_at for r in rows],
                "keys": [json.dumps([e.key for e in f]) for f in found],
                "kinds": [json.dumps([e.kind for e in f]) for f in found],
            },
        )
        after = rows[-1].id


def downgrade() -> None:
    op.execute("DROP TABLE entity_alias")
    op.execute("DROP INDEX memory_entities")
    op.execute("ALTER TABLE memory DROP COLUMN entities, DROP COLUMN entity_kinds")
