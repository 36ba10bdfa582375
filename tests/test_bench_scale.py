"""The large bench's statement that forgets the store-only pass (bench/scale.py): run on a
migrated database, it must name every table a foreign key ties to a memory, or PostgreSQL
refuses the TRUNCATE (memory_access, added by migration 0025, stopped a 1,000,000-memory run
on 2026-12-07 after its 50,000-row passes)."""

from __future__ import annotations

import re

from sqlalchemy import text

from bench.scale import _FORGET_FIRST_K


async def test_the_store_only_pass_is_forgotten_with_every_table_tied_to_memories(
    client,
) -> None:
    named = set(re.findall(r"\w+", _FORGET_FIRST_K.split("TRUNCATE")[1].split(";")[0]))
    async with client.app.state.components.sessionmaker() as s:
        tied = set(
            (
                await s.execute(
                    text("""SELECT DISTINCT c.conrelid::regclass::text FROM pg_constraint c
                            WHERE c.contype = 'f'
                              AND c.confrelid IN ('memory'::regclass, 'memory_key'::regclass)""")
                )
            ).scalars()
        )
    assert tied == {"memory_access", "memory_alias", "memory_version"}
    assert tied <= named
