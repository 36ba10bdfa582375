"""The SQL of a snapshot's restore (app/snapshots): which of its memories may come back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader


class RestoreRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def restorable(self, memory_ids: Sequence[int], reader: Reader) -> dict[int, Any]:
        """Of these memories, under the robot's lock (a restore's), those still current (not
        deleted, validity not ended) that its owner (`reader`) may still read, locked FOR KEY
        SHARE as a placement's are, by id."""
        readable, params = reader.where()
        rows = await self.session.execute(
            sql(f"""
            SELECT m.id, m.created_at, m.key, m.content, m.token_count, m.importance
            FROM memory_key k
            JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
            WHERE k.memory_id = ANY(CAST(:ids AS bigint[])) AND m.deleted_at IS NULL
              AND (m.valid_to IS NULL OR m.valid_to > now()) AND {readable}
            FOR KEY SHARE OF m"""),
            {"ids": list(memory_ids), **params},
        )
        return {r.id: r for r in rows}
