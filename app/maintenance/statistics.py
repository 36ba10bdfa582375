"""Statistics that exist: `memory` analyzed soon after a large load (issue 46).

Recall plans full text from the column statistics ANALYZE keeps on memory.search_tsv and the
vector search's selectivity from its row estimate (app/recall/repository.py). A namespace
just bulk-loaded (POST …/memories/batch, `htm import`) has none until autovacuum gets to the
table (its naptime, then its own queue), and meanwhile hybrid recall counts each question
word's matches: 11.9 ms of a 27 ms floor at 10,000 memories before ANALYZE.

So a periodic pass (app/lifespan.py, one process at a time: app/db/jobs.exclusive) reads
how many of memory's rows changed since its last analyze (pg_stat_user_tables, its chunks'
on a TimescaleDB hypertable) and runs ANALYZE when they are at least
HTM_ANALYZE_MIN_CHANGED_ROWS and at least ANALYZE_SCALE of the rows it held (autovacuum's
default rule, with a lower floor and no wait for its naptime). The interval debounces it: at
most one ANALYZE per HTM_ANALYZE_INTERVAL_S however fast rows arrive, off every request's
path. A table whose autovacuum is switched off (`ALTER TABLE memory SET (autovacuum_enabled =
false)`, as the bench does while it measures) is left alone: its statistics are the operator's.
After an ANALYZE the process forgets the search caches' statistics, so its next recall plans
with them; the other processes read them within the caches' TTL (a minute).
"""

from __future__ import annotations

import logging

from app.db.session import Sessionmaker
from app.maintenance.statistics_repository import StatisticsRepository
from app.recall.caches import SearchCaches

log = logging.getLogger(__name__)


class StatisticsWorker:
    """One pass: ANALYZE memory when enough of it changed since its last analyze."""

    def __init__(
        self, *, sessionmaker: Sessionmaker, caches: SearchCaches, min_changed: int
    ) -> None:
        self.sessionmaker = sessionmaker
        self.caches = caches
        self.min_changed = min_changed
        self.analyzed = 0  # ANALYZEs this process ran

    async def run_once(self) -> bool:
        """Whether it analyzed."""
        async with self.sessionmaker() as session:
            repository = StatisticsRepository(session)
            stale = await repository.staleness()
            if not stale.due(self.min_changed):
                await session.rollback()
                return False
            await session.commit()  # no snapshot held across the ANALYZE
            await repository.analyze()
            await session.commit()
        self.analyzed += 1
        self.caches.lexeme_stats.forget()
        self.caches.table_rows.forget()
        log.info(
            "analyzed memory: %d rows changed since its last analyze (of %.0f)",
            stale.changed,
            stale.rows,
        )
        return True
