"""Read replicas (HTM_DATABASE_REPLICA_URLS): which server a unit of work's reads run on.

A unit of work that may read from a replica (recall, list, a retrieve that touches nothing,
stats: their routes ask for `ReadFrom`) gets a `ReplicaReads` session beside its primary
session; everything that writes runs on the primary session. A replica serves the reads when
it is up, its last measured lag plus the age of that measure is within HTM_REPLICA_MAX_LAG_S
and, for a read that carries a consistency token (a write's LSN), once it has replayed that
LSN (`pg_last_wal_replay_lsn()`), waited for up to HTM_REPLICA_WAIT_S. Otherwise the primary
serves them. A statement that fails on a replica (down, cut off, cancelled by recovery, too
slow) runs again on the next replica or on the primary: a replica never fails a read.

Lag is measured on the reads' way, at most every `check_interval_s`, in a task of its own:
the primary's flushed LSN is sampled, then each replica's replay LSN read; a replica's lag is
the age of the newest sample it has replayed (0 when it has replayed the latest). Unlike
`pg_last_xact_replay_timestamp()`, that does not grow while the primary is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import TextClause

from app.db.rows import Result
from app.db.session import DatabaseErrors, DbSession, Sessionmaker
from app.db.sql import sql
from app.errors import DependencyTimeout, ServiceUnavailable

log = logging.getLogger(__name__)

# A pg_lsn as PostgreSQL writes it: two hexadecimal halves, e.g. 16/B374D848.
LSN_PATTERN = r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$"
# The WAL flushed, read after a unit of work committed: at or past the end of every commit
# record the request waited for. (Not the insert position: that may include other sessions'
# asynchronous commits, which the WAL writer flushes up to 200 ms later, and a replica
# cannot replay before. The only commits that do not wait are reads' log rows.)
FLUSHED = sql("SELECT pg_current_wal_flush_lsn()::text")
# NULL on a server that is not in recovery (a URL naming a primary): always current.
REPLAYED = sql(
    "SELECT pg_last_wal_replay_lsn()::text AS lsn, "
    "extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS age"
)
# A read's retry elsewhere after these SQLSTATEs on a replica: cancelled by a conflict with
# recovery (40001, 40P01), a write refused in recovery (25006: no read should write).
RETRIED_SQLSTATES = {"40001", "40P01", "25006"}
POLL_S = (0.001, 0.02)  # a token's wait polls the replica from every 1 ms up to every 20 ms


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def replica_failure(exc: BaseException) -> bool:
    """A failure that says nothing about the read itself: the replica's, so it runs again
    elsewhere. The session maps lost connections to 503s and timeouts to DependencyTimeout."""
    if isinstance(exc, ServiceUnavailable | DependencyTimeout | OSError):
        return True
    driver = getattr(exc, "orig", None) or exc
    return getattr(driver, "sqlstate", None) in RETRIED_SQLSTATES


@dataclass(frozen=True)
class ReadFrom:
    """A unit of work's reads may run on a replica; with `token`, one that has replayed it."""

    token: int | None = None


@dataclass(eq=False)
class Replica:
    name: str  # host and database, for logs (no credentials)
    engine: AsyncEngine
    sessionmaker: Sessionmaker
    up: bool = False  # unknown until its first check
    lag_s: float = 0.0
    checked_at: float = float("-inf")
    replayed: int = 0  # the highest replay LSN seen, by checks and waits


@dataclass
class Replicas:
    replicas: list[Replica]
    primary: Sessionmaker
    max_lag_s: float
    wait_s: float
    check_interval_s: float
    clock: Callable[[], float] = time.monotonic
    # What served reads: "replica", or the primary and why ("primary: lagging" when no
    # replica was usable, "primary: token" after the wait, "primary: failed" after a failure).
    served: Counter[str] = field(default_factory=Counter)
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=1000))
    _checking: asyncio.Task[None] | None = None
    _check_started: float = float("-inf")
    _turn: int = 0

    def reads(self, primary: DbSession, read_from: ReadFrom) -> DbSession:
        """The session a unit's reads run in (`primary`: the unit's own session)."""
        now = self.clock()
        if self._checking is None and now - self._check_started >= self.check_interval_s:
            self._check_started = now
            self._checking = asyncio.get_running_loop().create_task(self._check_then_clear())
        return ReplicaReads(self, primary, read_from.token)

    def usable(self) -> list[Replica]:
        """The replicas a read may use now, in turn (round robin)."""
        now = self.clock()
        found = [
            r for r in self.replicas if r.up and now - r.checked_at + r.lag_s <= self.max_lag_s
        ]
        self._turn += 1
        k = self._turn % len(found) if found else 0
        return found[k:] + found[:k]

    def failed(self, replica: Replica, exc: BaseException) -> None:
        if replica.up:
            log.warning("read replica %s skipped: %s", replica.name, exc)
        replica.up = False  # until a check finds it up again
        replica.replayed = 0  # a server back from a failure may be another (restored) one

    async def token(self) -> str | None:
        """A consistency token for what the request committed; None when the primary cannot
        say (the write is acknowledged all the same: no 5xx after a commit)."""
        try:
            async with self.primary() as session:
                return str((await session.execute(FLUSHED)).scalar_one())
        except Exception as exc:  # whatever it is: the write is done and acknowledged
            log.warning("no consistency token: %s", exc)
            return None

    async def _check_then_clear(self) -> None:
        try:
            await self.check()
        except Exception:
            log.exception("replica lag check failed")
        finally:
            self._checking = None

    async def check(self) -> None:
        """Measure every replica's lag once (see the module's docstring)."""
        try:
            async with self.primary() as session:
                flushed = parse_lsn((await session.execute(FLUSHED)).scalar_one())
        except (ServiceUnavailable, DependencyTimeout) as exc:
            log.warning("replica lag not measured, the primary is unavailable: %s", exc)
            return
        self._samples.append((self.clock(), flushed))
        await asyncio.gather(*(self._check_one(r) for r in self.replicas))

    async def _check_one(self, replica: Replica) -> None:
        try:
            async with replica.sessionmaker() as session:
                row = (await session.execute(REPLAYED)).one()
        except Exception as exc:
            if not replica_failure(exc):
                raise
            self.failed(replica, exc)
            return
        now = self.clock()
        if row.lsn is None:  # not in recovery
            replica.lag_s = 0.0
            replica.replayed = 1 << 64
        else:
            replica.replayed = parse_lsn(row.lsn)
            replica.lag_s = self._lag(replica.replayed, row.age, now)
        replica.checked_at = now
        was, replica.up = replica.up, replica.lag_s <= self.max_lag_s
        if was != replica.up:
            level = logging.INFO if replica.up else logging.WARNING
            state = "in use" if replica.up else "skipped"
            log.log(level, "read replica %s %s (lag %.1f s)", replica.name, state, replica.lag_s)

    def _lag(self, replayed: int, age: float | None, now: float) -> float:
        newest = self._samples[-1]
        if replayed >= newest[1]:
            return 0.0
        caught = [t for t, lsn in self._samples if lsn <= replayed]
        if caught:
            return now - max(caught)
        # Behind every sample kept: at least as old as the oldest, and its last replayed
        # transaction's age says more when the samples are young (a process just started).
        return max(now - self._samples[0][0], age or 0.0)

    async def aclose(self) -> None:
        if self._checking is not None:
            self._checking.cancel()
            with contextlib.suppress(BaseException):
                await self._checking
        for replica in self.replicas:
            await replica.engine.dispose()


class ReplicaReads(DbSession):
    """A unit of work's read session: on a replica chosen at its first statement (after the
    token's wait), else the unit's primary session. A statement a replica fails runs again on
    the next one, at last on the primary; it never commits anything."""

    def __init__(self, replicas: Replicas, primary: DbSession, token: int | None) -> None:
        super().__init__(primary._engine, primary.errors)
        self._replicas = replicas
        self._primary = primary
        self._token = token
        self._on: DbSession | None = None
        self._replica: Replica | None = None
        self._tried: set[Replica] = set()
        self._deadline: float | None = None

    @property
    def on_replica(self) -> bool:
        return self._replica is not None

    async def execute(
        self,
        clause: TextClause,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Result:
        while True:
            session = self._on or await self._choose()
            if session is self._primary:
                return await session.execute(clause, params)
            try:
                return await session.execute(clause, params)
            except Exception as exc:
                if not replica_failure(exc):
                    raise
                await self._leave(exc)

    async def _leave(self, exc: BaseException) -> None:
        assert self._replica is not None and self._on is not None
        self._replicas.failed(self._replica, exc)
        self._replicas.served["primary: failed"] += 1
        session, self._on, self._replica = self._on, None, None
        with contextlib.suppress(Exception):
            await session.close()

    async def _choose(self) -> DbSession:
        r = self._replicas
        if self._deadline is None:
            self._deadline = r.clock() + r.wait_s
        candidates = [c for c in r.usable() if c not in self._tried]
        token = self._token
        if token is not None:  # one that has replayed the token first: no wait
            candidates.sort(key=lambda c: c.replayed < token)
        for replica in candidates:
            self._tried.add(replica)
            session = replica.sessionmaker()
            try:
                if token is None or replica.replayed >= token or await self._wait(replica, session):
                    self._on, self._replica = session, replica
                    r.served["replica"] += 1
                    return session
            except Exception as exc:
                if not replica_failure(exc):
                    raise
                r.failed(replica, exc)
            await session.close()
        reason = "token" if token is not None and candidates else "lagging"
        r.served[f"primary: {reason}"] += 1
        self._on = self._primary
        return self._primary

    async def _wait(self, replica: Replica, session: DbSession) -> bool:
        """Poll the replica until it has replayed the token, or the deadline passes."""
        assert self._token is not None and self._deadline is not None
        pause = POLL_S[0]
        while True:
            row = (await session.execute(REPLAYED)).one()
            replayed = (1 << 64) if row.lsn is None else parse_lsn(row.lsn)
            replica.replayed = max(replica.replayed, replayed)
            if replayed >= self._token:
                return True
            left = self._deadline - self._replicas.clock()
            if left <= 0:
                return False
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_S[1])

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._primary.after_commit(callback)

    async def commit(self) -> None:
        """Nothing to commit: the unit commits its primary session."""

    async def rollback(self) -> None:
        if self._on is not None and self._on is not self._primary:
            await self._on.rollback()

    async def close(self) -> None:
        """Return a replica's connection; the primary session is the unit's to close."""
        session, self._on, self._replica = self._on, None, None
        if session is not None and session is not self._primary:
            await session.close()

    async def release(self) -> None:
        await self.close()


def open_replicas(
    urls: list[str],
    primary: Sessionmaker,
    engine_for: Callable[[str], AsyncEngine],
    sessionmaker_for: Callable[[AsyncEngine, DatabaseErrors], Sessionmaker],
    *,
    max_lag_s: float,
    wait_s: float,
) -> Replicas | None:
    """The replicas of HTM_DATABASE_REPLICA_URLS (None: none configured), each with its
    engine; nothing connects here. Their failures are not the app's 503s (`DatabaseErrors`
    of their own): a read they fail is served elsewhere."""
    if not urls:
        return None
    replicas = []
    for url in urls:
        engine = engine_for(url)
        name = f"{engine.url.host or engine.url.query.get('host', '')}:{engine.url.port or ''}"
        replicas.append(
            Replica(
                f"{name}/{engine.url.database}", engine, sessionmaker_for(engine, DatabaseErrors())
            )
        )
    # Lag is measured four times within the bound, and at least every second.
    check_s = min(1.0, max_lag_s / 4)
    return Replicas(replicas, primary, max_lag_s, wait_s, check_s)
