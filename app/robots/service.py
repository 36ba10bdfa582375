from __future__ import annotations

from typing import Any

from app.auth.caller import Caller
from app.db.session import DbSession
from app.errors import NotFound
from app.resources import Resources
from app.robots.cache import Robot
from app.robots.repository import RobotRepository
from app.robots.schemas import RobotRead, RobotUpdate

__all__ = ["Robot", "RobotService"]


class RobotService:
    def __init__(self, session: DbSession, caller: Caller, res: Resources) -> None:
        self.session = session
        self.res = res
        self.repo = RobotRepository(session)
        self.caller = caller
        self.default_budget = res.settings.working_memory_budget
        self.cache = res.robot_cache

    def _robot(self, row: Any) -> Robot:
        return Robot(
            row.id,
            row.name,
            row.working_memory_budget or self.default_budget,
            row.working_memory_stale,
        )

    def _read(self, row: Any) -> RobotRead:
        return RobotRead(
            name=row.name,
            working_memory_budget=row.working_memory_budget or self.default_budget,
            working_memory_budget_is_default=row.working_memory_budget is None,
            created_at=row.created_at,
            last_seen_at=row.last_seen_at,
        )

    def _remember(self, row: Any) -> Robot:
        robot = self._robot(row)
        self.cache.put(self.caller.namespace_id, robot)
        return robot

    async def ensure(self, name: str) -> Robot:
        """The robot, registered on first use."""
        robot = self.cache.get(self.caller.namespace_id, name)
        if robot is not None:
            return robot
        row, created = await self.repo.ensure(self.caller.namespace_id, name)
        # A robot created by this transaction is not cached: if the request fails (a 409,
        # say) the row is rolled back, and a cached id would point at nothing.
        return self._robot(row) if created else self._remember(row)

    async def require(self, name: str) -> Robot:
        """The robot, or 404: reads never register robots."""
        robot = self.cache.get(self.caller.namespace_id, name)
        if robot is not None:
            return robot
        row = await self.repo.get(self.caller.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._remember(row)

    async def list(self) -> list[RobotRead]:
        return [self._read(r) for r in await self.repo.list(self.caller.namespace_id)]

    async def get(self, name: str) -> RobotRead:
        row = await self.repo.get(self.caller.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._read(row)

    async def put(self, name: str, body: RobotUpdate) -> RobotRead:
        row = await self.repo.upsert_budget(
            self.caller.namespace_id, name, body.working_memory_budget
        )
        robot = self._remember(row)
        two_tier = self.res.write_protocol(
            self.session, self.caller.namespace_id, self.caller.namespace
        )
        await two_tier.commit_durable()
        # A smaller budget takes effect at once: the working memory is trimmed by policy.
        await two_tier.apply_budget(robot)
        return self._read(row)
