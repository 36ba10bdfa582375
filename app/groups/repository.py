"""All SQL for groups: a group is a robot row (`is_group`, named `group:<name>`) whose working
memory its members (robot.group_id) share."""

from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

_READ = """
    SELECT g.id, g.name, g.working_memory_budget,
           ARRAY(SELECT m.name FROM robot m WHERE m.group_id = g.id ORDER BY m.name) AS members
    FROM robot g"""


class GroupRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def upsert(self, namespace_id: int, row_name: str, budget: int | None) -> Any:
        """The group's row, created or given the budget, and locked for the membership change."""
        return (
            await self.session.execute(
                sql("""
                INSERT INTO robot (namespace_id, name, is_group, working_memory_budget)
                VALUES (:ns, :name, true, :budget)
                ON CONFLICT (namespace_id, name) DO UPDATE
                    SET working_memory_budget = excluded.working_memory_budget
                RETURNING id"""),
                {"ns": namespace_id, "name": row_name, "budget": budget},
            )
        ).one()

    async def lock(self, namespace_id: int, row_name: str) -> Any | None:
        """The group's row, locked for a membership change; None when there is none."""
        return (
            await self.session.execute(
                sql("""
                SELECT id FROM robot
                WHERE namespace_id = :ns AND name = :name AND is_group
                FOR UPDATE"""),
                {"ns": namespace_id, "name": row_name},
            )
        ).one_or_none()

    async def others(self, namespace_id: int, group_id: int, names: list[str]) -> list[Any]:
        """Those of `names` that are members of another group: (name, group row name)."""
        return list(
            await self.session.execute(
                sql("""
                SELECT r.name, g.name AS group_name FROM robot r JOIN robot g ON g.id = r.group_id
                WHERE r.namespace_id = :ns AND r.name = ANY(CAST(:names AS text[]))
                  AND r.group_id <> :gid
                ORDER BY r.name"""),
                {"ns": namespace_id, "gid": group_id, "names": names},
            )
        )

    async def set_members(self, namespace_id: int, group_id: int, names: list[str]) -> list[str]:
        """Register the robots new to the namespace, then make exactly `names` the members.
        Returns every robot whose membership changed (joined or left), by name."""
        await self.session.execute(
            sql("""
            INSERT INTO robot (namespace_id, name)
            SELECT :ns, n FROM unnest(CAST(:names AS text[])) n ORDER BY n
            ON CONFLICT (namespace_id, name) DO NOTHING"""),
            {"ns": namespace_id, "names": names},
        )
        rows = await self.session.execute(
            sql("""
            UPDATE robot SET group_id = CASE WHEN name = ANY(CAST(:names AS text[]))
                                             THEN CAST(:gid AS bigint) END
            WHERE namespace_id = :ns AND NOT is_group
              AND (group_id = :gid OR name = ANY(CAST(:names AS text[])))
              AND group_id IS DISTINCT FROM
                  CASE WHEN name = ANY(CAST(:names AS text[])) THEN CAST(:gid AS bigint) END
            RETURNING name"""),
            {"ns": namespace_id, "gid": group_id, "names": names},
        )
        return sorted(r.name for r in rows)

    async def get(self, namespace_id: int, row_name: str) -> Any | None:
        return (
            await self.session.execute(
                sql(f"{_READ} WHERE g.namespace_id = :ns AND g.name = :name AND g.is_group"),
                {"ns": namespace_id, "name": row_name},
            )
        ).one_or_none()

    async def list(self, namespace_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql(f"{_READ} WHERE g.namespace_id = :ns AND g.is_group ORDER BY g.name"),
                {"ns": namespace_id},
            )
        )

    async def delete(self, group_id: int) -> None:
        """The members leave (ON DELETE SET NULL) and the mirror rows go (CASCADE)."""
        await self.session.execute(sql("DELETE FROM robot WHERE id = :id"), {"id": group_id})
