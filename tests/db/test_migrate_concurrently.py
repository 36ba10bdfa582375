"""Migrations of one database take turns (an advisory lock in alembic/env.py): `make run`
and `htm keys create` started together on a fresh data directory both migrate it first."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
from sqlalchemy.engine import make_url

from app.config import PROJECT_ROOT


async def test_three_processes_migrating_a_fresh_database_at_once_all_succeed(
    database_factory,  # type: ignore[no-untyped-def]
) -> None:
    url = await database_factory()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HTM_")}
    env |= {"HTM_DATABASE_URL": url, "HTM_LOG_LEVEL": "warning"}
    # Alembic's context is process-global: concurrent migrations are separate processes.
    procs = [
        subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-m", "app.cli", "migrate"],
            cwd=PROJECT_ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outcomes = [(p.wait(120), p.stderr.read() if p.stderr else "") for p in procs]
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    u = make_url(url)
    conn = await asyncpg.connect(
        user=u.username, host=u.query.get("host") or u.host, port=u.port, database=u.database
    )
    try:
        versions = await conn.fetch("SELECT version_num FROM alembic_version")
    finally:
        await conn.close()
    assert len(versions) == 1
