"""app/db/jobs.exclusive: a job's pass runs in one process at a time (an advisory lock per
job on a connection of its own); here two engines stand for two processes."""

from __future__ import annotations

import asyncio

from app.db.engine import create_engine
from app.db.jobs import exclusive
from tests.conftest import make_settings


async def test_one_pass_at_a_time_across_engines_and_the_lock_is_freed(database_url) -> None:
    engines = [create_engine(make_settings(database_url, "redis://unused")) for _ in range(2)]
    running, most, ran = 0, 0, []

    async def one_pass(name: str) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.3)
        running -= 1
        ran.append(name)
        return name

    try:
        a = exclusive(engines[0], "job", lambda: one_pass("a"))
        b = exclusive(engines[1], "job", lambda: one_pass("b"))
        other = exclusive(engines[1], "another job", lambda: one_pass("c"))
        first = asyncio.create_task(a())
        await asyncio.sleep(0.1)  # a holds the lock
        results = await asyncio.gather(b(), other(), first)
        assert results == [None, "c", "a"]  # b skipped; another job's lock is its own
        assert sorted(ran) == ["a", "c"]
        assert await b() == "b"  # a's lock was released with its pass
    finally:
        for e in engines:
            await e.dispose()
