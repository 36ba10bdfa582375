"""Async Alembic environment."""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool
from sqlalchemy.ext.asyncio import create_async_engine

from app.config import get_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# The migrations in versions/ are the schema: written by hand (hypertables, HNSW, generated
# tsvector columns, triggers are beyond autogenerate), with no ORM models to compare against.
target_metadata = None


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    if not url:
        raise SystemExit("no database: set HTM_DATABASE_URL or run `htm migrate`")
    return url


# Any constant: the key of the advisory lock that makes migrations of one database take turns.
MIGRATION_LOCK = 0x68746D  # "htm"


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        # Two processes migrating one database at once (`make run` and `htm keys create` on
        # a fresh data directory) take turns; the second then reads the version the first
        # committed and has nothing left to do. Released with the transaction.
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
