"""The SQL of the embedding worker's queue (app/memories/embedding_worker.py): lease pending
memories, store their vectors, postpone the ones that failed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.config import VectorStorage
from app.db.lease import lease, lease_statement
from app.db.session import DbSession
from app.db.sql import sql, vector_text

# The embedding worker's queue: what it needs of each leased row to embed it (its vector's
# input, app/memories/search_text.py `vector_input`) and to store the vector only if the text
# searched is still what it was when leased (set_embeddings).
_SEARCHED = "coalesce(m.search_text, m.content)"
_LEASE = lease_statement(
    "embedding",
    f"m.id, m.created_at, m.content, m.metadata, m.search_text, md5({_SEARCHED}) AS digest, "
    "m.embedding_attempts",
)


class EmbeddingRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def lease_pending(self, limit: int, lease_s: float) -> Sequence[Any]:
        """Claim a batch of memories awaiting an embedding for `lease_s` seconds
        (app/db/lease.py)."""
        return await lease(self.session, _LEASE, limit, lease_s)

    async def set_embeddings(
        self,
        rows: Sequence[Any],
        vectors: Sequence[Sequence[float]],
        model: str,
        storage: VectorStorage,
    ) -> None:
        """Store the vectors of leased rows whose content is still what was embedded (a
        replace meanwhile reset the row to pending, for its new content)."""
        await self.session.execute(
            sql(f"""
            UPDATE memory m SET embedding = CAST(t.e AS {storage}), embedding_model = :model,
                   embedding_status = 'ready', embedding_error = NULL, embedding_next_at = NULL
            FROM unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                        CAST(:digests AS text[]), CAST(:es AS text[])) AS t(id, c, digest, e)
            WHERE m.id = t.id AND m.created_at = t.c
              AND md5(coalesce(m.search_text, m.content)) = t.digest
              AND m.embedding_status = 'pending'"""),
            {
                "ids": [r.id for r in rows],
                "cs": [r.created_at for r in rows],
                "digests": [r.digest for r in rows],
                "es": [vector_text(v) for v in vectors],
                "model": model,
            },
        )

    async def postpone_embeddings(
        self,
        rows: Sequence[Any],
        error: str,
        *,
        max_backoff_s: float,
        give_up_after: int | None,
    ) -> None:
        """Another attempt later: exponential backoff per row (2^attempts seconds, capped; the
        exponent too, so it never overflows). give_up_after: when the error is the texts'
        own, a row that failed that many times is marked 'failed' instead (it stays out of
        vector search, and the API shows why). None: the provider was unreachable, which
        says nothing about the texts, and they are retried for as long as that lasts."""
        await self.session.execute(
            sql("""
            UPDATE memory m SET embedding_attempts = m.embedding_attempts + 1,
                   embedding_error = :error,
                   embedding_status = CASE
                       WHEN m.embedding_attempts + 1 >= CAST(:give_up AS int) THEN 'failed'
                       ELSE m.embedding_status END,
                   embedding_next_at = now() + make_interval(
                       secs => least(power(2, least(m.embedding_attempts, 30)), :cap))
            FROM unnest(CAST(:ids AS bigint[]), CAST(:cs AS timestamptz[]),
                        CAST(:digests AS text[])) AS t(id, c, digest)
            WHERE m.id = t.id AND m.created_at = t.c
              AND md5(coalesce(m.search_text, m.content)) = t.digest
              AND m.embedding_status = 'pending'"""),
            {
                "ids": [r.id for r in rows],
                "cs": [r.created_at for r in rows],
                "digests": [r.digest for r in rows],
                "error": error[:500],
                "cap": max_backoff_s,
                "give_up": give_up_after,
            },
        )
