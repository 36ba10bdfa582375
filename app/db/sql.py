"""Textual SQL, parsed once per distinct statement, and compiled once for the driver.

`sqlalchemy.text()` scans its string for bind parameters every time it is called, which is
too slow to do per request (bench/README.md, "Figures behind the code"). Statements built
from filters repeat too (a handful of shapes), so a bounded cache covers them as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect


@lru_cache(maxsize=1024)
def sql(statement: str) -> TextClause:
    return text(statement)


def vector_text(embedding: Sequence[float]) -> str:
    """pgvector's text form, "[0.1,-0.2,...]" (what orjson writes for a list of floats), to
    bind as text and cast to vector in SQL. That works whether or not the connection
    registered pgvector's binary codec, and costs little; as real[] a vector went through
    asyncpg's generic array encoder, which checks every element."""
    return orjson.dumps([float(x) for x in embedding]).decode()


# A CTE for statements that write only the activity log or the working-memory mirror, in a
# transaction that changes nothing a client is told is stored (a recall, a read, or an add's
# second transaction, after the memory committed). It sets synchronous_commit=off for the
# rest of the transaction, so its commit does not wait for the WAL flush: a crash within the
# WAL writer's delay (a few hundred ms) can lose those rows, never an acknowledged change.
# Set inside the statement, it costs no round trip of its own. A statement joins `flush`.
RELAXED_FLUSH_CTE = "flush AS (SELECT set_config('synchronous_commit', 'off', true) AS relaxed)"

# A memory `m`'s accesses and the latest (migration 0025: memory_access, a row per memory
# accessed at least once, written by app/memories/access.py).
ACCESS_COUNT = "coalesce((SELECT a.access_count FROM memory_access a WHERE a.memory_id = m.id), 0)"
LAST_ACCESSED_AT = "(SELECT a.last_accessed_at FROM memory_access a WHERE a.memory_id = m.id)"
# What feedback taught of `m` (migrations 0027, 0032; app/memories/learning.py): [scale, shift,
# uses, misses, pins, nearby forgets] in one lookup, NULL without a step; and its learned
# importance (its importance when none).
FEEDBACK = """(SELECT ARRAY[a.learn_scale, a.learn_shift, a.uses, a.misses, a.pins,
                     a.nearby_forgets]
        FROM memory_access a
        WHERE a.memory_id = m.id AND a.uses + a.misses + a.pins + a.nearby_forgets > 0)"""
LEARNED_IMPORTANCE = """coalesce((SELECT least(10, greatest(0, a.learn_scale * m.importance
                                                    + a.learn_shift))
        FROM memory_access a WHERE a.memory_id = m.id), m.importance)"""


_DIALECT = asyncpg_dialect()


def compiled(clause: TextClause) -> tuple[str, list[str]]:
    """The clause as the driver's `$n` SQL, and the bind names in `$n` order."""
    return _compile(clause.text)


@lru_cache(maxsize=1024)
def _compile(statement: str) -> tuple[str, list[str]]:
    c = sql(statement).compile(dialect=_DIALECT)
    return c.string, list(c.positiontup or [])


def bound(
    clause: TextClause, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None
) -> tuple[str, list[Any], bool]:
    """(SQL, arguments, many) for the driver. A list of parameter sets runs once per set
    (many: the arguments are one row per set); a one-element list runs as a single
    statement, as SQLAlchemy does."""
    sql, names = compiled(clause)
    if params is None:
        return sql, [], False
    if isinstance(params, Sequence):
        if len(params) != 1:
            return sql, [[p[n] for n in names] for p in params], True
        params = params[0]
    return sql, [params[n] for n in names], False
