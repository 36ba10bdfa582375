"""Shared checks and levers for the two-tier write protocol's tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text

from app.working_memory.audit import audit


def namespace_of(client: Any) -> str:
    return str(client.headers["X-Namespace"])


async def disagreements(client: Any, robots: list[str]) -> dict[str, list[str]]:
    """audit() per robot; only robots with problems appear."""
    res = client.app.state.components
    out = {}
    async with res.sessionmaker() as session:
        for robot in robots:
            problems = await audit(
                session,
                res.working_memory,
                namespace_of(client),
                robot=robot,
                default_budget=res.settings.working_memory_budget,
            )
            if problems:
                out[robot] = problems
    return out


async def scalar(client: Any, query: str, **params: Any) -> Any:
    async with client.app.state.components.sessionmaker() as s:
        return (await s.execute(text(query), params)).scalar()


async def robot_id(client: Any, robot: str) -> int:
    return int(
        await scalar(
            client,
            """SELECT r.id FROM robot r JOIN namespace n ON n.id = r.namespace_id
               WHERE n.name = :ns AND r.name = :robot""",
            ns=namespace_of(client),
            robot=robot,
        )
    )


async def keys_held(client: Any, robot: str) -> dict[str, str]:
    """The robot's working memory as Redis serves it: key -> content."""
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    assert r.json()["degraded"] is False
    return {i["key"]: i["content"] for i in r.json()["items"]}


@contextlib.asynccontextmanager
async def robot_locked(client: Any, robot: str) -> AsyncIterator[None]:
    """Hold the robot's working-memory lock from another connection: every change of that
    robot's working memory waits at its first step until the block ends."""
    engine = client.app.state.components.engine
    rid = await robot_id(client, robot)
    async with engine.connect() as conn:
        # The lock is the robot's working_memory_change row (migration 0034), made at its
        # first change: made here if the robot has had none yet.
        await conn.execute(
            text("""INSERT INTO working_memory_change (namespace_id, robot_id)
                    SELECT namespace_id, id FROM robot WHERE id = :id
                    ON CONFLICT DO NOTHING"""),
            {"id": rid},
        )
        await conn.commit()
        await conn.execute(
            text("SELECT 1 FROM working_memory_change WHERE robot_id = :id FOR NO KEY UPDATE"),
            {"id": rid},
        )
        yield
        await conn.rollback()


async def wait_for_lock_waiters(client: Any, n: int = 1) -> list[int]:
    """Backends waiting on a row lock (the requests parked by robot_locked); 10 s at most."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        async with client.app.state.components.engine.connect() as conn:
            pids = list(
                (
                    await conn.execute(
                        text("""SELECT pid FROM pg_stat_activity
                                WHERE wait_event_type = 'Lock' AND datname = current_database()
                                ORDER BY pid""")
                    )
                ).scalars()
            )
        if len(pids) >= n:
            return pids
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{len(pids)} of {n} requests waiting on a lock")
        await asyncio.sleep(0.02)
