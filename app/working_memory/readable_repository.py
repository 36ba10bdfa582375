"""What a working memory's owner may still read, asked under its lock: a snapshot's memories
that may come back (app/snapshots), and the pools a placement's memories are in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import Reader, pool_grants
from app.working_memory.model import Placement, Scope
from app.working_memory.robots import Robot


class ReadableRepository:
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

    async def readable_pools(self, namespace_id: int, robot: str, pool_ids: set[int]) -> set[int]:
        """Of these pools, those `robot` may read now, each locked FOR SHARE: a grant being
        taken away (its pool row updated) waits for this placement to commit, and then finds
        what it placed; or this waits for the change, and reads the grants after it."""
        rows = await self.session.execute(
            sql(f"""
            SELECT p.id FROM pool p
            WHERE p.namespace_id = :ns AND p.id = ANY(CAST(:ids AS bigint[]))
              AND {pool_grants(":robot")}
            FOR SHARE OF p"""),
            {"ns": namespace_id, "ids": sorted(pool_ids), "robot": robot},
        )
        return {r.id for r in rows}

    async def lost(self, scope: Scope, robot: Robot, placements: Sequence[Placement]) -> set[str]:
        """The keys of `placements` in a pool `robot` may no longer read (readable_pools)."""
        pooled = {p.audience.pool_id for p in placements if p.audience.pool_id is not None}
        if not pooled:
            return set()
        readable = await self.readable_pools(scope.namespace_id, robot.name, pooled)
        return {p.key for p in placements if p.audience.pool_id not in (None, *readable)}
