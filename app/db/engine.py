"""Engine and session factory, created in the lifespan; the request session dependency."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.config import Settings


def create_engine(settings: Settings) -> AsyncEngine:
    if not settings.database_url:
        raise RuntimeError(
            "HTM_DATABASE_URL is not set; `htm serve` starts an embedded PostgreSQL for you"
        )
    return create_async_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_pre_ping=True,
        # Statements are short; a stuck connection should fail the request, not hang it.
        connect_args={"command_timeout": 30, "server_settings": {"jit": "off"}},
    )


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
