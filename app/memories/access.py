"""Access counts off the request's path: retrieves and recall hits are counted in this
process and written about once a second (app/workers.periodic), one statement for all.

A request only adds to a dict; the flush swaps the dict out and writes it. A flush that
fails puts its counts back for the next one, so an outage of PostgreSQL loses none; a
process that dies loses at most the last interval's counts (they are a relevance signal, not
a record: the `access` and `recall` events are the record).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from app.db.session import Sessionmaker
from app.memories.access_repository import AccessRepository

log = logging.getLogger(__name__)


class AccessTracker:
    def __init__(self, sessionmaker: Sessionmaker) -> None:
        self.sessionmaker = sessionmaker
        self._pending: dict[int, tuple[int, datetime]] = {}
        self.flushed = 0  # accesses written so far (tests, /metrics)

    def record(self, memory_ids: Iterable[int], at: datetime) -> None:
        for id_ in memory_ids:
            n, last = self._pending.get(id_, (0, at))
            self._pending[id_] = (n + 1, max(last, at))

    @property
    def pending(self) -> int:
        return sum(n for n, _ in self._pending.values())

    async def flush(self) -> int:
        """Write the counts gathered so far; returns how many accesses were written."""
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}
        ids = sorted(batch)
        try:
            async with self.sessionmaker() as session, session.begin():
                await AccessRepository(session).add(
                    ids, [batch[i][0] for i in ids], [batch[i][1] for i in ids]
                )
        except Exception:
            for id_, (n, at) in batch.items():  # kept for the next flush
                m, last = self._pending.get(id_, (0, at))
                self._pending[id_] = (m + n, max(last, at))
            raise
        written = sum(n for n, _ in batch.values())
        self.flushed += written
        return written
