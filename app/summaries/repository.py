"""The eviction summaries' SQL: which robots have evictions to summarise, what they evicted,
and the watermark."""

from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.stats.repository import StatsRepository

_DUE = sql("""
    SELECT r.id AS robot_id, r.name AS robot, r.summarized_through AS watermark,
           coalesce(r.working_memory_budget, :default_budget) AS budget,
           n.id AS namespace_id, n.name AS namespace
    FROM robot r JOIN namespace n ON n.id = r.namespace_id
    WHERE r.summarize_evictions
      AND EXISTS (SELECT 1 FROM memory_event e
                  WHERE e.robot_id = r.id AND e.kind = 'evict' AND e.id > r.summarized_through)
    ORDER BY r.id
    LIMIT :limit""")

# The robot's evictions after the watermark, oldest first, with what each memory holds now;
# memories since forgotten, and summaries (a summary is not summarised again), are skipped
# but still move the watermark; so are private, group and pool memories (read as forgotten):
# a summary is namespace-wide, and must not tell what not every robot may read.
_EVICTED = sql("""
    SELECT e.id AS event_id, m.key, m.content, m.importance, m.type,
           CASE WHEN m.visibility = 'namespace' THEN m.deleted_at ELSE now() END AS deleted_at
    FROM (SELECT id, memory_id FROM memory_event
          WHERE robot_id = :robot AND kind = 'evict' AND id > :after
          ORDER BY id LIMIT :limit) AS e
    LEFT JOIN memory m ON m.id = e.memory_id
    ORDER BY e.id""")

_ADVANCE = sql("""
    UPDATE robot SET summarized_through = greatest(summarized_through, :through)
    WHERE id = :robot""")


class SummaryRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def due(self, limit: int, default_budget: int) -> list[Any]:
        params = {"limit": limit, "default_budget": default_budget}
        return list((await self.session.execute(_DUE, params)).all())

    async def working_memory_tokens(self, namespace_id: int, robot_id: int) -> int:
        """What the robot's working memory holds, by its Postgres mirror (equal to Redis
        after every change: the write protocol)."""
        return (await StatsRepository(self.session).membership_usage(namespace_id, robot_id))[0]

    async def evicted_since(self, robot_id: int, after: int, limit: int) -> list[Any]:
        params = {"robot": robot_id, "after": after, "limit": limit}
        return list((await self.session.execute(_EVICTED, params)).all())

    async def advance(self, robot_id: int, through: int) -> None:
        await self.session.execute(_ADVANCE, {"robot": robot_id, "through": through})
