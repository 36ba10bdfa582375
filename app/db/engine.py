"""The engine (pool, codecs, connection settings), created in the lifespan."""

from __future__ import annotations

import orjson
from pgvector.asyncpg import register_vector
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.config import Settings

# Every connection's session settings (the bench's floor uses the same).
# jit: off, as a 2-core service gains nothing from compiling short statements.
# plan_cache_mode: asyncpg prepares every statement, and after five executions PostgreSQL
# may switch a prepared statement to a generic plan that knows none of its values. Ours are
# shaped by filters and time ranges whose selectivity decides the plan: a generic plan of
# recall's exact one-week vector search is several times slower than its custom plan, and
# one for full text would bitmap-scan every match of a common word. Planning our statements
# is cheap next to that, so every execution gets its own plan.
SERVER_SETTINGS = {"jit": "off", "plan_cache_mode": "force_custom_plan"}
# asyncpg's client-side timeout: a backstop for a server or network that stopped answering
# altogether. It stays well above the server-side statement_timeout so that a slow statement
# is cancelled by the server (the connection stays usable) before the client gives up on it
# (the connection is then dropped, as it may still be busy).
COMMAND_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_MARGIN_S = 5.0


def server_settings(settings: Settings) -> dict[str, str]:
    """Session settings every connection starts with: sent in the startup packet, so they
    cost no round trip. statement_timeout ends any statement that runs longer (SQLSTATE
    57014, a 503 for the request); migrations use their own connection and are not bound."""
    return {**SERVER_SETTINGS, "statement_timeout": str(settings.statement_timeout_ms)}


def command_timeout(settings: Settings) -> float:
    return max(COMMAND_TIMEOUT_S, settings.statement_timeout_ms / 1000 + COMMAND_TIMEOUT_MARGIN_S)


# A replica that does not answer is skipped after this long, not asyncpg's default minute.
REPLICA_CONNECT_TIMEOUT_S = 2.0


def create_engine(settings: Settings, replica_url: str | None = None) -> AsyncEngine:
    """The primary's engine, or with `replica_url` a read replica's (the same settings)."""
    url = replica_url or settings.database_url
    if not url:
        raise RuntimeError(
            "HTM_DATABASE_URL is not set; `htm serve` starts an embedded PostgreSQL for you"
        )
    connect: dict[str, object] = {"timeout": REPLICA_CONNECT_TIMEOUT_S} if replica_url else {}
    engine = create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        # No pre-ping: it cost a round trip per checkout (a fifth of an add's time). A
        # connection broken by a database restart raises a disconnect error, which SQLAlchemy
        # turns into invalidating the pool, so only in-flight requests see the outage (503).
        pool_recycle=1800,
        # Statements are short; a stuck one should fail the request, not hang it.
        connect_args={
            **connect,
            "command_timeout": command_timeout(settings),
            "server_settings": server_settings(settings),
        },
        # jsonb columns (metadata, details) are read with orjson: every recall hit carries
        # its metadata, and the stdlib's json.loads showed in recall's profile.
        json_deserializer=orjson.loads,
    )
    _register_vector_codec(engine)
    return engine


def _register_vector_codec(engine: AsyncEngine) -> None:
    # pgvector's binary codec: vectors travel as 4-byte floats instead of decimal text,
    # several times cheaper to encode and parse for 384+ dimensions. A parameter typed
    # vector is therefore a list or numpy array; statements that cast text to vector
    # themselves take app.db.sql.vector_text() instead.
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        try:
            dbapi_connection.run_async(register_vector)
        except ValueError:  # "unknown type": the database is not migrated yet
            pass
