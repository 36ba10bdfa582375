"""All SQL of the enrichment worker: its queue (memory.enrichment_*, migration 0013) and the
namespace's tag ontology it offers the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.db.lease import lease, lease_statement
from app.db.session import DbSession
from app.db.sql import sql

ONTOLOGY_SIZE = 200

# What the worker asks the model about and for whom it writes: the memory, its namespace's
# and author's names.
_LEASE = lease_statement(
    "enrichment",
    """m.id, m.created_at, m.namespace_id, m.key, m.content, m.token_count,
       m.enrichment_attempts, m.visibility,
       (SELECT n.name FROM namespace n WHERE n.id = m.namespace_id) AS namespace,
       (SELECT r.name FROM robot r WHERE r.id = m.author_robot_id) AS author""",
)


class EnrichmentRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def lease_pending(self, limit: int, lease_s: float) -> Sequence[Any]:
        """Claim memories awaiting enrichment for `lease_s` (app/db/lease.py)."""
        return await lease(self.session, _LEASE, limit, lease_s)

    async def ontology(self, namespace_id: int) -> list[str]:
        """The namespace's most used tag paths (every tag and its ancestors), most used first."""
        rows = await self.session.execute(
            sql("""
            SELECT p.path FROM memory m, unnest(tag_paths(m.tags)) AS p(path)
            WHERE m.namespace_id = :ns AND m.deleted_at IS NULL
            GROUP BY p.path ORDER BY count(*) DESC, p.path LIMIT :n"""),
            {"ns": namespace_id, "n": ONTOLOGY_SIZE},
        )
        return [r.path for r in rows]

    async def done(self, memory_id: int) -> None:
        await self.session.execute(
            sql("""
            UPDATE memory SET enrichment_status = 'done', enrichment_next_at = NULL,
                              enrichment_error = NULL
            WHERE id = :id"""),
            {"id": memory_id},
        )

    async def failed(self, memory_id: int, error: str, next_in_s: float | None) -> None:
        """One more failed attempt: tried again in `next_in_s`, or (None) given up."""
        await self.session.execute(
            sql("""
            UPDATE memory SET enrichment_attempts = enrichment_attempts + 1,
                enrichment_error = :error,
                enrichment_status = CASE WHEN CAST(:next AS float8) IS NULL THEN 'failed'
                                         ELSE 'pending' END,
                enrichment_next_at = now() + make_interval(secs => coalesce(:next, 0))
            WHERE id = :id"""),
            {"id": memory_id, "error": error[:1000], "next": next_in_s},
        )
