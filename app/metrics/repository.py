"""The SQL /metrics runs at scrape time: the embedding backlog, from the maintained counters
and the pending-embedding partial index, never a scan of the memory table."""

from __future__ import annotations

from app.db.session import DbSession
from app.db.sql import sql

# Never-tried pending rows (embedding_next_at NULL) wait since their last write; a tried one
# since its retry came due. The NULL entries are read in the index's order (the heap's, about
# the order of writing) and capped, so a huge backlog costs a bounded read: the lag is then
# a lower bound.
_QUEUE = sql("""
    SELECT (SELECT coalesce(sum(pending), 0)::bigint FROM namespace_memory_count) AS pending,
           coalesce(extract(epoch FROM now() - least(
               (SELECT min(updated_at) FROM (
                    SELECT updated_at FROM memory
                    WHERE embedding_status = 'pending' AND embedding_next_at IS NULL
                      AND deleted_at IS NULL
                    LIMIT 10000) never_tried),
               (SELECT min(embedding_next_at) FROM memory
                WHERE embedding_status = 'pending' AND embedding_next_at <= now()
                  AND deleted_at IS NULL)
           )), 0)::float8 AS lag_s""")


class MetricsRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def embedding_queue(self) -> tuple[int, float]:
        """(memories pending an embedding, seconds the longest-waiting due one has waited)."""
        row = (await self.session.execute(_QUEUE)).one()
        return int(row.pending), max(0.0, float(row.lag_s))
