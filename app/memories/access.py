"""Access counts off the request's path: retrieves and recall hits (memories), and the
session messages a prompt takes, are counted in this process and written about once a second
(app/workers.periodic), one statement for each table. The steps of a memory's learned
importance (app/memories/learning.py: feedback on its use, a pin, a neighbour forgotten) take
the same way: composed here, written by the same flush.

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
from app.memories.learning import Kind, Steps, step

log = logging.getLogger(__name__)


class AccessTracker:
    def __init__(self, sessionmaker: Sessionmaker, learning_rate: float = 0.2) -> None:
        self.sessionmaker = sessionmaker
        self.learning_rate = learning_rate
        self._pending: dict[int, tuple[int, datetime]] = {}
        # memory id -> its feedback since the last flush, composed in the order it came
        self._feedback: dict[int, Steps] = {}
        # (session id, seq) -> accesses: a prompt takes up to hundreds of messages, and an
        # UPDATE of each per prompt was most of a prompt's work in PostgreSQL.
        self._messages: dict[tuple[int, int], int] = {}
        self.flushed = 0  # accesses written so far (tests, /metrics)

    def record(self, memory_ids: Iterable[int], at: datetime) -> None:
        for id_ in memory_ids:
            n, last = self._pending.get(id_, (0, at))
            self._pending[id_] = (n + 1, max(last, at))

    def record_feedback(self, memory_id: int, kind: Kind) -> None:
        """One step of the learning rule (app/memories/learning.py) for the memory, after
        those recorded before it."""
        before = self._feedback.get(memory_id, Steps())
        self._feedback[memory_id] = before.then(step(kind, self.learning_rate))

    def record_messages(self, session_id: int, seqs: Iterable[int]) -> None:
        for seq in seqs:
            key = (session_id, seq)
            self._messages[key] = self._messages.get(key, 0) + 1

    @property
    def pending(self) -> int:
        return (
            sum(n for n, _ in self._pending.values())
            + sum(self._messages.values())
            + sum(s.count for s in self._feedback.values())
        )

    async def flush(self) -> int:
        """Write the counts gathered so far; returns how many accesses were written."""
        if not self._pending and not self._messages and not self._feedback:
            return 0
        batch, self._pending = self._pending, {}
        messages, self._messages = self._messages, {}
        feedback, self._feedback = self._feedback, {}
        ids = sorted(batch)
        keys = sorted(messages)
        learned = sorted(feedback)
        try:
            async with self.sessionmaker() as session, session.begin():
                if ids:
                    await AccessRepository(session).add(
                        ids, [batch[i][0] for i in ids], [batch[i][1] for i in ids]
                    )
                if keys:
                    await AccessRepository(session).add_messages(
                        [k[0] for k in keys], [k[1] for k in keys], [messages[k] for k in keys]
                    )
                if learned:
                    await AccessRepository(session).learn(learned, [feedback[i] for i in learned])
        except Exception:
            for id_, (n, at) in batch.items():  # kept for the next flush
                m, last = self._pending.get(id_, (0, at))
                self._pending[id_] = (m + n, max(last, at))
            for key, n in messages.items():
                self._messages[key] = self._messages.get(key, 0) + n
            for id_, steps in feedback.items():  # before what came since
                self._feedback[id_] = steps.then(self._feedback.get(id_, Steps()))
            raise
        written = (
            sum(n for n, _ in batch.values())
            + sum(messages.values())
            + sum(s.count for s in feedback.values())
        )
        self.flushed += written
        return written
