"""The lease of a job queue kept in memory's own columns: the embedding queue (migration 0001's
embedding_status / embedding_next_at, the embedding worker) and the enrichment queue
(migration 0013's enrichment_*, the LLM enrichment worker).

A lease moves `<queue>_next_at` of up to `limit` pending, live memories to the lease's end,
so concurrent workers (and a worker that died holding them) skip them until then. The rows
are picked oldest lease first (never leased first), then by id, and locked with SKIP LOCKED:
two workers leasing at once take disjoint rows instead of waiting on each other. It runs in
a short transaction of its own; no row lock outlives it.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import TextClause

from app.db.session import DbSession
from app.db.sql import sql

Queue = Literal["embedding", "enrichment"]
QUEUES: tuple[Queue, ...] = ("embedding", "enrichment")


def lease_statement(queue: Queue, returning: str) -> TextClause:
    """The lease of `queue`, returning `returning` of each leased row (`m` is the memory);
    binds :limit (rows) and :lease (seconds)."""
    if queue not in QUEUES:  # the name becomes part of the column names in the SQL
        raise ValueError(f"no queue {queue!r}")
    return sql(f"""
        UPDATE memory m SET {queue}_next_at = now() + make_interval(secs => :lease)
        FROM (SELECT id, created_at FROM memory
              WHERE {queue}_status = 'pending' AND deleted_at IS NULL
                AND ({queue}_next_at IS NULL OR {queue}_next_at <= now())
              ORDER BY {queue}_next_at NULLS FIRST, id
              LIMIT :limit
              FOR UPDATE SKIP LOCKED) AS c
        WHERE m.id = c.id AND m.created_at = c.created_at
        RETURNING {returning}""")


async def lease(session: DbSession, statement: TextClause, limit: int, lease_s: float) -> list[Any]:
    """Run a lease statement: the rows it claimed for `lease_s` seconds."""
    return list(await session.execute(statement, {"limit": limit, "lease": lease_s}))
