"""Facts about the database the service runs on, detected at runtime (like TimescaleDB).

`is_citus`: whether it is a Citus coordinator. Migration 0031 distributed its namespace-scoped
tables there, and a statement that reads what an earlier part of itself wrote goes to every
worker (app/memories/repository.py, `_APART`)."""

from __future__ import annotations

from app.db.session import DbSession
from app.db.sql import sql

_CITUS = sql("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")


async def is_citus(session: DbSession) -> bool:
    return bool((await session.execute(_CITUS)).scalar_one())
