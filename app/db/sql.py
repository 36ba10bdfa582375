"""Textual SQL, parsed once per distinct statement.

`sqlalchemy.text()` scans its string for bind parameters every time it is called; called per
request, that was ~6% of an add's CPU in py-spy. Statements built from filters repeat too
(a handful of shapes), so a bounded cache covers them as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import orjson
from sqlalchemy import TextClause, text


@lru_cache(maxsize=1024)
def sql(statement: str) -> TextClause:
    return text(statement)


def vector_text(embedding: Sequence[float]) -> str:
    """pgvector's text form, "[0.1,-0.2,...]" (what orjson writes for a list of floats), to
    bind as text and cast to vector in SQL. That works whether or not the connection
    registered pgvector's binary codec, and costs little; as real[] a vector went through
    asyncpg's generic array encoder, which checks every element (~0.5 ms of CPU for 384)."""
    return orjson.dumps([float(x) for x in embedding]).decode()


# A CTE for statements that write only the activity log or the working-memory mirror, in a
# transaction that changes nothing a client is told is stored (a recall, a read, or an add's
# second transaction, after the memory committed). It sets synchronous_commit=off for the
# rest of the transaction, so its commit does not wait for the WAL flush: a crash within the
# WAL writer's delay (a few hundred ms) can lose those rows, never an acknowledged change.
# Set inside the statement, it costs no round trip of its own. A statement joins `flush`.
RELAXED_FLUSH_CTE = "flush AS (SELECT set_config('synchronous_commit', 'off', true) AS relaxed)"
