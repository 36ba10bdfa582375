"""The SQL of the tier audit (app/working_memory/audit.py): what Postgres says a robot's
working memory holds. Read-only."""

from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import sql


class AuditRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def robot(self, namespace: str, robot: str, default_budget: int) -> Any | None:
        """The robot's id, budget and stale mark, or None when it does not exist."""
        return (
            await self.session.execute(
                sql("""
                SELECT r.id, r.namespace_id, coalesce(r.working_memory_budget, :default) AS budget,
                       r.working_memory_stale AS stale
                FROM robot r JOIN namespace n ON n.id = r.namespace_id
                WHERE n.name = :ns AND r.name = :robot"""),
                {"ns": namespace, "robot": robot, "default": default_budget},
            )
        ).one_or_none()

    async def listed(self, namespace_id: int, robot_id: int) -> dict[int, Any]:
        """The mirror's members (in working memory, or owing a withdrawal) by memory id, with
        the memory as stored (its columns NULL when the row is gone)."""
        rows = await self.session.execute(
            sql("""
            SELECT w.memory_id AS id, m.key, m.content, m.token_count, m.importance,
                   m.deleted_at, m.superseded_by, w.stale_at
            FROM working_memory_item w
            LEFT JOIN memory m ON m.namespace_id = :ns AND m.id = w.memory_id
                                  AND m.created_at = w.memory_created_at
            WHERE w.namespace_id = :ns AND w.robot_id = :robot
              AND (w.in_working_memory OR w.stale_at IS NOT NULL)"""),
            {"ns": namespace_id, "robot": robot_id},
        )
        return {m.id: m for m in rows}
