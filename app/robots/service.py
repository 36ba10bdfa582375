from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.errors import NotFound
from app.robots.cache import Robot, RobotCache, group_name, robot_from_row
from app.robots.repository import RobotRepository
from app.robots.schemas import RobotRead, RobotUpdate
from app.working_memory.protocol import WriteProtocol

__all__ = ["Robot", "RobotService"]


class RobotService:
    def __init__(
        self,
        session: DbSession,
        namespace_id: int,
        cache: RobotCache,
        default_budget: int,
        two_tier: WriteProtocol,
    ) -> None:
        self.repo = RobotRepository(session)
        self.namespace_id = namespace_id
        self.cache = cache
        self.default_budget = default_budget
        self.two_tier = two_tier

    def _robot(self, row: Any) -> Robot:
        return robot_from_row(row, self.default_budget)

    def _read(self, row: Any) -> RobotRead:
        return RobotRead(
            name=row.name,
            working_memory_budget=row.working_memory_budget or self.default_budget,
            working_memory_budget_is_default=row.working_memory_budget is None,
            session_ttl_s=row.session_ttl_s,
            summarize_evictions=row.summarize_evictions,
            created_at=row.created_at,
            last_seen_at=row.last_seen_at,
            group=group_name(row.g_name) if getattr(row, "g_name", None) else None,
        )

    def _remember(self, row: Any) -> Robot:
        robot = self._robot(row)
        self.cache.put(self.namespace_id, robot)
        return robot

    async def ensure(self, name: str) -> Robot:
        """The robot, registered on first use."""
        robot = self.cache.get(self.namespace_id, name)
        if robot is not None:
            return robot
        row, created = await self.repo.ensure(self.namespace_id, name)
        # A robot created by this transaction is not cached: if the request fails (a 409,
        # say) the row is rolled back, and a cached id would point at nothing.
        return self._robot(row) if created else self._remember(row)

    async def require(self, name: str) -> Robot:
        """The robot, or 404: reads never register robots."""
        robot = self.cache.get(self.namespace_id, name)
        if robot is not None:
            return robot
        row = await self.repo.get(self.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._remember(row)

    async def list(self) -> list[RobotRead]:
        return [self._read(r) for r in await self.repo.list(self.namespace_id)]

    async def get(self, name: str) -> RobotRead:
        row = await self.repo.get(self.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._read(row)

    async def put(self, name: str, body: RobotUpdate) -> RobotRead:
        row = await self.repo.upsert_budget(
            self.namespace_id,
            name,
            body.working_memory_budget,
            body.session_ttl_s,
            body.summarize_evictions,
        )
        await self.two_tier.commit_durable()
        row = await self.repo.get(self.namespace_id, name)  # with its group's columns
        # Cached only once committed: a robot this request created may not exist otherwise.
        robot = self._remember(row)
        # A smaller budget takes effect at once: the working memory is trimmed by policy.
        await self.two_tier.apply_budget(robot)
        return self._read(row)
