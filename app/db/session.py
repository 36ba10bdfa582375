"""The unit of work the repositories run in: one pooled connection, one transaction at a time.

Repositories hold their SQL as `text()` clauses (app.db.sql). `DbSession` compiles each once
with SQLAlchemy's asyncpg dialect (named binds become `$n`) and runs it on the asyncpg
connection under the engine's pooled one. SQLAlchemy keeps what it is good at here: the pool
(with its codecs, recycling and invalidation), the compiler, and migrations. It does not sit
between a statement and the driver: its ORM session and execution context cost more CPU
per statement than most of our statements take in PostgreSQL (bench/README.md, "Figures
behind the code").

The session checks a connection out on first use, so a request answered from caches and
Redis alone costs none, and starts a transaction whenever a statement runs outside one: after
`commit()`, the next statement begins the next transaction on the same connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.transaction import Transaction
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import TextClause

from app.db.rows import Result, Row
from app.db.spans import statement_span
from app.db.sql import bound
from app.errors import (
    DB_TIMEOUT,
    DB_UNAVAILABLE,
    DependencyTimeout,
    RemovedMeanwhile,
    ServiceUnavailable,
    database_failure,
    is_database_gone,
    is_node_unreachable,
    is_statement_timeout,
)
from app.tracing import database_call


def connection_lost(exc: BaseException, driver: asyncpg.Connection | None) -> bool:
    """The connection or the server went away (app.errors.is_database_gone: SQLSTATE class
    08, 57P01-57P03, a socket error), or the connection is closed after the error."""
    if is_database_gone(exc):
        return True
    # The server ended the connection (a restart, pg_terminate_backend) while it sat in the
    # pool: depending on when asyncpg reads the news, the next call fails with "connection is
    # closed" or a protocol state error, and the connection is closed afterwards either way.
    return driver is not None and driver.is_closed()


def removed_meanwhile(exc: BaseException) -> RemovedMeanwhile | None:
    """A foreign key that found nothing (23503): a row this change refers to, read a moment
    ago (a robot from the robot cache, say), was deleted by a concurrent transaction."""
    driver = getattr(exc, "orig", None) or exc
    if getattr(driver, "sqlstate", None) != "23503":
        return None
    return RemovedMeanwhile(
        "something this change refers to was removed meanwhile; nothing was written: retry"
    )


@dataclass
class DatabaseErrors:
    """Database failures this app's sessions answered as 503 (for /metrics): the server
    unreachable or gone, and statements that did not finish in time."""

    unavailable: int = 0
    timeouts: int = 0


class DbSession:
    def __init__(self, engine: AsyncEngine, errors: DatabaseErrors | None = None) -> None:
        self._engine = engine
        self.errors = errors if errors is not None else DatabaseErrors()
        self._conn: AsyncConnection | None = None
        self._driver: asyncpg.Connection | None = None
        self._tx: Transaction | None = None
        self._on_commit: list[Callable[[], None]] = []

    async def __aenter__(self) -> DbSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _begin(self) -> asyncpg.Connection:
        if self._driver is None:
            await self._connect()
        driver = self._driver
        assert driver is not None

        async def start() -> Transaction:
            tx = driver.transaction()  # raises at once if the connection is known closed
            await tx.start()
            return tx

        self._tx = await self._guarded(start)
        return driver

    async def _connect(self) -> None:
        """Check a connection out of the pool (opening one if needed). While the server is
        down, starting or stopping, that fails with a socket error, 57P03 "cannot connect
        now" (SQLAlchemy wraps asyncpg's PostgresErrors, not OSErrors) or a pool timeout:
        all of them 503."""
        try:
            self._conn = await self._engine.connect()
            raw = await self._conn.get_raw_connection()
        except BaseException as exc:
            if self._conn is not None:
                await self._discard()
            if database_failure(exc) is None:
                raise
            self.errors.unavailable += 1
            raise ServiceUnavailable(DB_UNAVAILABLE, dependency="postgres") from exc
        self._driver = raw.driver_connection

    async def _guarded(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Await a driver call. A lost connection is dropped from the pool and reported as
        the database being unavailable (503). A statement the server cancelled at
        statement_timeout is a 503 too; its transaction is aborted, and the caller's rollback
        leaves the connection as good as new. Anything else propagates as it is."""
        try:
            # Called inside the try: asyncpg checks a closed connection when the method is
            # called, before there is anything to await (Transaction.commit).
            return await call()
        except BaseException as exc:
            if isinstance(exc, TimeoutError):
                # asyncpg's client-side command_timeout: the connection may still be busy
                # with the statement, so it is dropped. Only this one: the server is up and
                # the pool's other connections are fine.
                await self._discard()
                self.errors.timeouts += 1
                raise DependencyTimeout(DB_TIMEOUT, dependency="postgres") from exc
            if is_node_unreachable(exc) and not (self._driver and self._driver.is_closed()):
                # Citus: a worker is down. Its words may come in class 08, a lost connection's,
                # but the coordinator sent them over this one, which is fine: keep it and the
                # pool's others (dropping them all made every request of every namespace open
                # a connection anew while the worker was down: bench/results/2026-12-07-citus.md).
                self.errors.unavailable += 1
                raise ServiceUnavailable(DB_UNAVAILABLE, dependency="postgres") from exc
            if connection_lost(exc, self._driver):
                await self._lost()
                self.errors.unavailable += 1
                raise ServiceUnavailable(DB_UNAVAILABLE, dependency="postgres") from exc
            if is_statement_timeout(exc):
                self.errors.timeouts += 1
                raise DependencyTimeout(DB_TIMEOUT, dependency="postgres") from exc
            gone = removed_meanwhile(exc)
            if gone is not None:
                raise gone from exc
            raise

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the current unit of work has committed (dropped if it rolls
        back): for caches that must not forget a change before it is visible to others."""
        self._on_commit.append(callback)

    async def execute(
        self,
        clause: TextClause,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    ) -> Result:
        """Run one statement in the current transaction (begun if none is open). A list of
        parameter sets runs the statement once per set (asyncpg's executemany)."""
        driver = self._driver if self._tx is not None else await self._begin()
        assert driver is not None
        sql, args, many = bound(clause, params)
        with database_call("postgresql", lambda: statement_span(sql, self._engine.url)):
            if many:
                await self._guarded(lambda: driver.executemany(sql, args))
                return Result([])
            return Result(await self._guarded(lambda: driver.fetch(sql, *args, record_class=Row)))

    async def commit(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            await self._guarded(tx.commit)
        callbacks, self._on_commit = self._on_commit, []
        for callback in callbacks:
            callback()

    async def rollback(self) -> None:
        """Roll back the open transaction. A connection that cannot roll back (lost, or left
        mid-statement by a cancelled request) is dropped instead, which ends it as well."""
        tx, self._tx = self._tx, None
        self._on_commit.clear()
        if tx is None:
            return
        try:
            await tx.rollback()
        except Exception:
            await self._discard()
        except BaseException:
            await self._discard()
            raise

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[DbSession]:
        """A transaction that commits when the block succeeds and rolls back when it fails."""
        try:
            yield self
        except BaseException:
            await self.rollback()
            raise
        await self.commit()

    async def release(self) -> None:
        """Return the connection to the pool between units of work (nothing may be left
        uncommitted); the next statement checks one out again."""
        assert self._tx is None, "release() with a transaction open"
        await self.close()

    async def close(self) -> None:
        """Roll back what is uncommitted and return the connection to the pool."""
        if self._conn is None:
            return
        try:
            await self.rollback()
        finally:
            conn, self._conn, self._driver = self._conn, None, None
            if conn is not None:
                await conn.close()

    async def _discard(self) -> None:
        """The connection is broken: the pool must not hand it out again."""
        conn, self._conn, self._driver, self._tx = self._conn, None, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    async def _lost(self) -> None:
        """The server went away: drop this connection, and the pool's others with it (they
        are as dead after a restart), as SQLAlchemy does on a disconnect error."""
        await self._discard()
        with contextlib.suppress(Exception):
            await self._engine.dispose()


Sessionmaker = Callable[[], DbSession]


def create_sessionmaker(engine: AsyncEngine, errors: DatabaseErrors | None = None) -> Sessionmaker:
    def sessionmaker() -> DbSession:
        return DbSession(engine, errors)

    return sessionmaker
