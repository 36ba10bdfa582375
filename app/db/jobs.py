"""A background job's pass run by one service process at a time (app/lifespan.background)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


def exclusive(
    engine: AsyncEngine, name: str, one_pass: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[Any]]:
    """`one_pass` run by one process at a time, however many serve: a pass first takes a
    session-level advisory lock named after the job on a connection of its own, and a
    process that does not get it skips its pass (the holder is doing the work; whatever it
    leaves due, the next pass finds). The lock goes with the connection, so a process that
    dies mid-pass frees it. For the jobs whose passes are not shared out row by row with
    SKIP LOCKED or leases: retention, scheduled maintenance, eviction summaries. (Needs
    session pooling in front of PostgreSQL, not PgBouncer's transaction mode.)"""
    digest = hashlib.blake2b(f"htm job {name}".encode(), digest_size=8).digest()
    key = int.from_bytes(digest, "big", signed=True)  # a bigint

    async def one_exclusive_pass() -> Any:
        async with engine.connect() as conn:
            if not await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}):
                return None
            await conn.commit()  # no transaction held open while the pass runs
            try:
                return await one_pass()
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                await conn.commit()

    return one_exclusive_pass
