from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, timedelta
from typing import Any

from app.auth.caller import Caller
from app.cache import TtlCache
from app.clock import Clock
from app.db.session import DbSession
from app.embeddings.query_cache import QueryEmbeddingCache
from app.health.repository import VersionRepository
from app.robots.repository import RobotRepository
from app.robots.service import RobotService
from app.stats.repository import StatsRepository
from app.stats.schemas import (
    CacheStats,
    DayActivity,
    LongTermStats,
    NamespaceStats,
    RobotStats,
    RobotUsage,
    Versions,
    WorkingMemoryUsage,
)
from app.visibility import Reader
from app.working_memory.robots import Robot, group_name, robot_from_row
from app.working_memory.service import WorkingMemoryService


class ServerFacts:
    """The servers' versions and the hypertables: they change with an upgrade or a migration,
    not from one request to the next, so stats re-read them once a minute (per app)."""

    def __init__(self, ttl_s: float = 60.0) -> None:
        self.cache: TtlCache[str, Any] = TtlCache(ttl_s, 4)

    async def get(self, name: str, read: Callable[[], Awaitable[Any]]) -> Any:
        found = self.cache.get(name)
        if found is None:
            found = await read()
            if found is not None:  # an unreachable Redis is asked again next time
                self.cache.put(name, found)
        return found


class StatsService:
    def __init__(
        self,
        *,
        session: DbSession,
        reads: DbSession,
        caller: Caller,
        robots: RobotService,
        working_memory: WorkingMemoryService,
        clock: Clock,
        query_cache: QueryEmbeddingCache,
        facts: ServerFacts | None = None,
    ) -> None:
        self.facts = facts or ServerFacts()
        self.query_cache = query_cache
        self.caller = caller
        self.robots = robots
        self.working_memory = working_memory
        self.clock = clock
        # The counts read in `reads` (a replica's session or the primary's:
        # app/db/replicas.py); the servers' versions are the primary's.
        self.repo = StatsRepository(reads)
        self.robot_rows = RobotRepository(reads)
        self.versions = VersionRepository(session)

    async def _usage(self, robot: Robot) -> WorkingMemoryUsage:
        return await self._usage_from(robot, await self.working_memory.usage(robot))

    async def _usage_from(self, robot: Robot, usage: tuple[int, int] | None) -> WorkingMemoryUsage:
        """The usage of the working memory the robot reads (its group's, in a group) as read
        from Redis, or (None: Redis unreachable) from Postgres membership, marked degraded."""
        wm = robot.working_memory
        degraded = usage is None
        tokens, items = (
            usage
            if usage is not None
            else await self.repo.membership_usage(self.caller.namespace_id, wm.id)
        )
        return WorkingMemoryUsage(
            group=group_name(robot.group.name) if robot.group else None,
            tokens=tokens,
            max_tokens=wm.budget,
            utilization=round(100.0 * tokens / wm.budget, 2),
            items=items,
            degraded=degraded,
        )

    async def robot(self, name: str, days: int) -> RobotStats:
        robot = await self.robots.require(name)
        lt = await self.repo.long_term(self.caller.namespace_id, robot.id)
        timescale = "memory_event" in await self.facts.get("hypertables", self.repo.hypertables)
        now = self.clock().astimezone(UTC)
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
        """The namespace's figures; through a key bound to a robot, only what that robot may
        read (its memories, its own working memory, its group's when it shares one): a count
        is metadata, and a robot sees none of what it may not read (app/visibility.py)."""
        ns, bound = self.caller.namespace_id, self.caller.robot
        counts = await self.repo.namespace(ns)
        if bound is None:
            rows = await self.robot_rows.list(ns)
        else:
            hidden = await self.repo.unreadable(ns, Reader(ns, bound))
            counts = {name: counts[name] - hidden[name] for name in counts}
            rows = [r for r in [await self.robot_rows.get(ns, bound)] if r is not None]
        listed = [robot_from_row(row, self.robots.default_budget) for row in rows]
        # One Redis round trip for every robot's usage, not one per robot.
        usages = await self.working_memory.usage_many(listed)
        robots = [
            RobotUsage(robot=robot.name, working_memory=await self._usage_from(robot, usage))
            for robot, usage in zip(listed, usages, strict=True)
        ]
        pg = await self.facts.get("postgres", self.versions.postgres)
        redis_version = await self.facts.get("redis", self._redis_version)
        return NamespaceStats(
            namespace=self.caller.namespace,
            memories=counts["memories"],
            deleted_memories=counts["deleted"],
            pending_embeddings=counts["pending_embeddings"],
            failed_embeddings=counts["failed_embeddings"],
            robots=robots,
            memory_bytes=counts["memory_bytes"],
            hypertables=await self.facts.get("hypertables", self.repo.hypertables),
            versions=Versions(redis=redis_version, **pg),
            query_embedding_cache=self._query_cache(),
        )

    async def _redis_version(self) -> str | None:
        try:
            return await self.working_memory.store.ping()
        except Exception:
            return None

    def _query_cache(self) -> CacheStats:
        c = self.query_cache
        looked = c.hits + c.misses
        return CacheStats(
            entries=len(c),
            max_entries=c.max_entries,
            hits=c.hits,
            misses=c.misses,
            hit_ratio=round(c.hits / looked, 4) if looked else None,
        )
