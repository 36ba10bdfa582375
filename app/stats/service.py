from __future__ import annotations

from datetime import UTC, timedelta

from app.auth.caller import Caller
from app.db.session import DbSession
from app.health.service import postgres_versions
from app.resources import Resources
from app.robots.repository import RobotRepository
from app.robots.service import Robot, RobotService
from app.stats.repository import StatsRepository
from app.stats.schemas import (
    DayActivity,
    LongTermStats,
    NamespaceStats,
    RobotStats,
    RobotUsage,
    Versions,
    WorkingMemoryUsage,
)
from app.working_memory.service import WorkingMemoryService


class StatsService:
    def __init__(self, session: DbSession, caller: Caller, res: Resources) -> None:
        self.caller = caller
        self.res = res
        self.repo = StatsRepository(session)
        self.robot_rows = RobotRepository(session)
        self.robots = RobotService(session, caller, res)
        self.working_memory = WorkingMemoryService(
            res.write_protocol(session, caller.namespace_id, caller.namespace)
        )

    async def _usage(self, robot: Robot) -> WorkingMemoryUsage:
        usage = await self.working_memory.usage(robot)
        degraded = usage is None
        tokens, items = usage if usage is not None else await self.repo.membership_usage(robot.id)
        return WorkingMemoryUsage(
            tokens=tokens,
            max_tokens=robot.budget,
            utilization=round(100.0 * tokens / robot.budget, 2),
            items=items,
            degraded=degraded,
        )

    async def robot(self, name: str, days: int) -> RobotStats:
        robot = await self.robots.require(name)
        lt = await self.repo.long_term(self.caller.namespace_id, robot.id)
        timescale = "memory_event" in await self.repo.hypertables()
        now = self.res.clock().astimezone(UTC)
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        rows = await self.repo.activity(
            robot.id, today - timedelta(days=days - 1), today + timedelta(days=1), timescale
        )
        return RobotStats(
            robot=robot.name,
            working_memory=await self._usage(robot),
            long_term=LongTermStats(
                memories=lt["memories"],
                by_type=lt["by_type"],
                oldest=lt["oldest"],
                newest=lt["newest"],
                pending_embeddings=lt["pending"],
                failed_embeddings=lt["failed"],
            ),
            activity=[
                DayActivity(day=r.day.date(), adds=r.adds, recalls=r.recalls, evictions=r.evictions)
                for r in rows
            ],
        )

    async def namespace(self) -> NamespaceStats:
        counts = await self.repo.namespace(self.caller.namespace_id)
        robots = []
        for row in await self.robot_rows.list(self.caller.namespace_id):
            robot = Robot(
                row.id,
                row.name,
                row.working_memory_budget or self.robots.default_budget,
                row.working_memory_stale,
            )
            robots.append(RobotUsage(robot=robot.name, working_memory=await self._usage(robot)))
        pg = await postgres_versions(self.res.engine)
        try:
            redis_version: str | None = await self.res.working_memory.ping()
        except Exception:
            redis_version = None
        return NamespaceStats(
            namespace=self.caller.namespace,
            memories=counts["memories"],
            deleted_memories=counts["deleted"],
            pending_embeddings=counts["pending_embeddings"],
            failed_embeddings=counts["failed_embeddings"],
            robots=robots,
            memory_bytes=counts["memory_bytes"],
            hypertables=await self.repo.hypertables(),
            versions=Versions(redis=redis_version, **pg),
        )
