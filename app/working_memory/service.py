"""Reads of working memory: from Redis, after the write protocol rebuilt a lost or stale one;
from the Postgres mirror (degraded, never failing) while Redis is unreachable. Every change
goes through app/working_memory/protocol.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.visibility import Reader
from app.working_memory.context import SEPARATOR, ContextResult, Strategy, assemble
from app.working_memory.items import Outline, WMItem, eviction_order
from app.working_memory.model import UNAVAILABLE, RedisUnavailable, from_us, member_items, to_us
from app.working_memory.protocol import WriteProtocol
from app.working_memory.robots import Robot, Robots, group_name
from app.working_memory.schemas import WorkingMemoryCleared, WorkingMemoryEntry, WorkingMemoryRead
from app.working_memory.store import WorkingMemoryNotInitialized

log = logging.getLogger(__name__)
T = TypeVar("T")


class WorkingMemoryService:
    def __init__(self, *, protocol: WriteProtocol, robots: Robots | None = None) -> None:
        self.protocol = protocol
        self.robots = robots
        self.store = protocol.store
        self.members = protocol.members

    @property
    def namespace(self) -> str:
        return self.protocol.namespace

    async def _read(
        self, robot: Robot, op: Callable[[], Awaitable[T]], *, rebuild: bool = True
    ) -> T:
        """op against Redis; a robot marked stale, or missing from Redis (new, or its data
        lost), is rebuilt first. RedisUnavailable while Redis is down. With rebuild=False
        such a robot raises WorkingMemoryNotInitialized instead, and nothing touches
        PostgreSQL: a caller may run the read beside its own statements."""
        breaker = self.protocol.breaker
        if breaker.open:
            raise RedisUnavailable("redis marked down")
        try:
            if robot.stale:
                if not rebuild:
                    raise WorkingMemoryNotInitialized(self.namespace, robot.name)
                await self.protocol.resync(robot)
            try:
                result = await op()
            except WorkingMemoryNotInitialized:
                if not rebuild:
                    raise
                await self.protocol.resync(robot)
                result = await op()
        except UNAVAILABLE as exc:
            breaker.trip()
            log.warning("redis unavailable: %s", exc)
            raise RedisUnavailable(str(exc)) from exc
        breaker.reset()
        return result

    async def snapshot(self, robot: Robot) -> tuple[list[WMItem], int, bool]:
        """Items in eviction order, token total, and whether this came from Postgres (degraded)."""
        robot = robot.working_memory  # a group member reads the group's
        await self.protocol.settle(robot)  # after this process's pending recall loads
        try:
            items, tokens = await self._read(
                robot, lambda: self.store.snapshot(self.namespace, robot.name)
            )
            return items, tokens, False
        except RedisUnavailable:
            items = await self._membership_items(robot)
            return items, sum(i.tokens for i in items), True

    async def outline(self, robot: Robot) -> tuple[list[Outline] | list[WMItem], bool]:
        """Every item in eviction order, and whether this came from Postgres (degraded).
        From Redis (rebuilt first if needed): outlines, without contents (contents() reads
        those a caller takes); from Postgres: whole items."""
        robot = robot.working_memory
        await self.protocol.settle(robot)  # after this process's pending recall loads
        try:
            read = await self._read(robot, lambda: self.store.outline(self.namespace, robot.name))
            return read, False
        except RedisUnavailable:
            return await self._membership_items(robot), True

    async def outline_from_redis(self, robot: Robot) -> list[Outline] | None:
        """outline() when Redis alone can answer it; None when it takes PostgreSQL too (a
        robot to rebuild, or Redis down: outline() then does that). Touches no database
        session, so a caller may run it beside its own statements (a prompt, beside recall)."""
        robot = robot.working_memory
        await self.protocol.settle(robot)  # after this process's pending recall loads
        try:
            return await self._read(
                robot, lambda: self.store.outline(self.namespace, robot.name), rebuild=False
            )
        except (WorkingMemoryNotInitialized, RedisUnavailable):
            return None

    async def contents(self, robot: Robot, keys: list[str]) -> list[tuple[str, int] | None]:
        """(content, tokens) of each key from Redis, None where the key holds no item (or
        Redis cannot answer): the caller read an outline and takes these."""
        robot = robot.working_memory
        if not keys:
            return []
        try:
            return await self._read(
                robot, lambda: self.store.contents(self.namespace, robot.name, keys), rebuild=False
            )
        except (WorkingMemoryNotInitialized, RedisUnavailable):
            return [None] * len(keys)

    async def _membership_items(self, robot: Robot) -> list[WMItem]:
        """The working set as Postgres knows it, in eviction order (serving while Redis is down)."""
        reader = Reader(self.protocol.scope.namespace_id, robot.name)
        return eviction_order(member_items(await self.members.members(robot.id, reader)))

    async def context(
        self, robot: Robot, strategy: Strategy, max_tokens: int
    ) -> tuple[ContextResult, bool]:
        """The strategy's context and whether it came from Postgres (degraded). Redis orders
        and cuts (the context script); assemble() does the same over Postgres membership."""
        robot = robot.working_memory
        await self.protocol.settle(robot)  # after this process's pending recall loads
        now_ms = to_us(self.protocol.clock()) // 1000
        try:
            contents, items, tokens = await self._read(
                robot,
                lambda: self.store.context(
                    self.namespace, robot.name, strategy, max_tokens=max_tokens, now_ms=now_ms
                ),
            )
        except RedisUnavailable:
            members = await self._membership_items(robot)
            return assemble(members, strategy, max_tokens, now_ms), True
        return ContextResult(SEPARATOR.join(contents), items, tokens, strategy), False

    async def usage(self, robot: Robot) -> tuple[int, int] | None:
        """(tokens, items) from Redis, rebuilding a lost working memory first; None while
        Redis is unreachable (the caller then reads Postgres membership: degraded)."""
        robot = robot.working_memory

        async def op() -> tuple[int, int]:
            usage = await self.store.usage(self.namespace, robot.name)
            if usage is None:  # the store answers None rather than raising on NOINIT
                raise WorkingMemoryNotInitialized(self.namespace, robot.name)
            return usage

        try:
            return await self._read(robot, op)
        except RedisUnavailable:
            return None

    async def usage_many(self, robots: list[Robot]) -> list[tuple[int, int] | None]:
        """usage() of each robot, read in one Redis round trip; a robot marked stale or
        missing from Redis takes usage()'s path (rebuilt first). None for each robot while
        Redis is unreachable."""
        holders = [r.working_memory for r in robots]
        if self.protocol.breaker.open:
            return [None] * len(robots)
        fresh = [h for h in holders if not h.stale]
        try:
            found = await self.store.usage_many(self.namespace, [h.name for h in fresh])
        except UNAVAILABLE as exc:
            self.protocol.breaker.trip()
            log.warning("redis unavailable: %s", exc)
            return [None] * len(robots)
        self.protocol.breaker.reset()
        read = dict(zip((h.name for h in fresh), found, strict=True))
        return [
            read[h.name] if read.get(h.name) is not None else await self.usage(h) for h in holders
        ]

    # --- the API's answers ----------------------------------------------------------------

    async def _robot(self, name: str) -> Robot:
        assert self.robots is not None, "built without a way to find robots"
        return await self.robots.require(name)

    async def read(self, robot_name: str) -> WorkingMemoryRead:
        rb = await self._robot(robot_name)
        items, tokens, degraded = await self.snapshot(rb)
        budget = rb.working_memory.budget
        return WorkingMemoryRead(
            robot=rb.name,
            group=group_name(rb.group.name) if rb.group else None,
            tokens=tokens,
            max_tokens=budget,
            utilization=utilization(tokens, budget),
            items=[
                WorkingMemoryEntry(
                    key=i.key,
                    content=i.content,
                    tokens=i.tokens,
                    importance=i.importance,
                    added_at=from_us(i.added_at_us),
                    last_access_at=from_us(i.last_access_ms * 1000),
                    from_recall=i.from_recall,
                )
                for i in items
            ],
            degraded=degraded,
        )

    async def clear(self, robot_name: str) -> WorkingMemoryCleared:
        rb = await self._robot(robot_name)
        return WorkingMemoryCleared(robot=rb.name, removed=await self.protocol.clear(rb))

    async def context_body(
        self, robot_name: str, strategy: Strategy, max_tokens: int | None
    ) -> dict[str, Any]:
        """The context response's body (ContextRead's shape), built with the schema's types
        by the store and assemble(), so the router returns it without validating it again."""
        rb = await self._robot(robot_name)
        limit = max_tokens or rb.working_memory.budget
        result, degraded = await self.context(rb, strategy, limit)
        return {
            "robot": rb.name,
            "strategy": result.strategy,
            "text": result.text,
            "items": result.items,
            "tokens": result.tokens,
            "max_tokens": limit,
            "degraded": degraded,
        }


def utilization(tokens: int, budget: int) -> float:
    """Percent of the budget in use, two decimals."""
    return round(100.0 * tokens / budget, 2)
