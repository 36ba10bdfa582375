"""The SQL of fact extraction: the turns a robot may read, by key or by conversation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader

_COLUMNS = "m.id, k.key, m.content, m.metadata, m.visibility, m.created_at"


class TurnReads:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def by_keys(self, namespace_id: int, keys: Sequence[str], reader: Reader) -> list[Any]:
        """The live memories of `keys` that `reader` may read (any order)."""
        readable, params = reader.where()
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT {_COLUMNS}
                    FROM memory_key k
                    JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                    WHERE k.namespace_id = :ns AND k.key = ANY(CAST(:keys AS text[]))
                      AND m.deleted_at IS NULL AND {readable}"""),
                    {"ns": namespace_id, "keys": list(keys), **params},
                )
            ).all()
        )

    async def of_session(
        self, namespace_id: int, session: str, reader: Reader, limit: int
    ) -> list[Any]:
        """The last `limit` live memories of the conversation that `reader` may read,
        oldest first (the index memory_session_turns)."""
        readable, params = reader.where()
        rows = (
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS}
                FROM memory m
                JOIN memory_key k ON k.memory_id = m.id AND k.memory_created_at = m.created_at
                WHERE m.namespace_id = :ns AND m.metadata ? 'session'
                  AND m.metadata ->> 'session' = :session
                  AND m.deleted_at IS NULL AND {readable}
                ORDER BY m.created_at DESC, m.id DESC
                LIMIT :limit"""),
                {"ns": namespace_id, "session": session, "limit": limit, **params},
            )
        ).all()
        return list(reversed(rows))
