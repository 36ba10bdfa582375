"""Working-memory rules: place after durable writes, rebuild after Redis data loss, degrade
(never fail) while Redis is unreachable."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from redis.exceptions import RedisError

from app.auth.caller import Caller
from app.db.session import DbSession
from app.events.repository import EventRepository
from app.memories.schemas import WorkingMemoryOutcome
from app.resources import Resources
from app.robots.cache import Robot
from app.working_memory.context import SEPARATOR, ContextResult, Strategy, assemble
from app.working_memory.repository import MembershipRepository
from app.working_memory.store import PlaceResult, WMItem, WorkingMemoryNotInitialized

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that mean "Redis is not there right now" rather than a bug.
UNAVAILABLE = (RedisError, OSError, TimeoutError)


def to_us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


@dataclass(frozen=True)
class Placement:
    """A memory as working memory needs it."""

    memory_id: int
    key: str
    content: str
    tokens: int
    importance: float

    @classmethod
    def of(cls, m: Any) -> Placement:
        return cls(m.id, m.key, m.content, m.token_count, m.importance)


class RedisUnavailable(Exception):
    pass


class WorkingMemoryService:
    def __init__(self, session: DbSession, caller: Caller, res: Resources) -> None:
        self.caller = caller
        self.res = res
        self.store = res.working_memory
        self.members = MembershipRepository(session)
        self.events = EventRepository(session, res.clock)

    @property
    def ns(self) -> str:
        return self.caller.namespace

    # --- Redis calls: rebuild on data loss, short-circuit while down -----------------------

    async def _call(self, robot: Robot, op: Callable[[], Awaitable[T]]) -> T:
        breaker = self.res.redis_breaker
        if breaker.open:
            raise RedisUnavailable("redis marked down")
        try:
            if robot.stale:
                await self._resync(robot)
            try:
                result = await op()
            except WorkingMemoryNotInitialized:
                # New robot, or Redis lost its data (restart, failover, FLUSHALL): rebuild
                # from Postgres membership, then retry once.
                await self._rebuild(robot)
                result = await op()
        except UNAVAILABLE as exc:
            breaker.trip()
            log.warning("redis unavailable: %s", exc)
            raise RedisUnavailable(str(exc)) from exc
        breaker.reset()
        return result

    async def _resync(self, robot: Robot) -> None:
        """Redis is back but may hold removals it missed: replace it from Postgres."""
        await self._rebuild(robot, force=True)
        await self.members.set_stale([robot.id], False)
        self.res.robot_cache.put(self.caller.namespace_id, replace(robot, stale=False))

    async def _mark_stale(self, robot_ids: list[int], names: list[str]) -> None:
        """A removal did not reach Redis: the next request for these robots rebuilds."""
        await self.members.set_stale(robot_ids, True)
        for name in names:
            self.res.robot_cache.forget(self.caller.namespace_id, name)

    async def _rebuild(self, robot: Robot, force: bool = False) -> PlaceResult:
        rows = await self.members.members(robot.id)
        items = [
            WMItem(
                key=r.key,
                content=r.content,
                tokens=r.token_count,
                importance=r.importance,
                added_at_us=to_us(r.added_at),
                last_access_ms=to_us(r.last_access_at) // 1000,
                from_recall=r.from_recall,
            )
            for r in rows
        ]
        # The budget may have shrunk since these were placed. load() places in the order
        # given and would evict among the items placed so far; trim by the eviction policy
        # over the whole set instead (lowest importance, then oldest), as place() would.
        total = sum(i.tokens for i in items)
        victims: list[WMItem] = []
        for it in sorted(items, key=lambda i: (i.importance, i.added_at_us, i.key)):
            if total <= robot.budget:
                break
            victims.append(it)
            total -= it.tokens
        keep = [i for i in items if i not in victims]
        result = await self.store.load(
            self.ns, robot.name, keep, robot.budget, only_if_missing=not force
        )
        # Only the request whose load acted records the trim (a concurrent rebuild that got
        # there first did the same; recording with its later seq could undo newer changes).
        if victims and result.admitted:
            await self.members.record(
                self.caller.namespace_id, robot.id, result.seq, [], [v.key for v in victims]
            )
            ids = {r.key: r.id for r in rows}
            await self.events.record(
                self.caller.namespace_id, "evict", robot.id, [ids[v.key] for v in victims]
            )
        if rows:
            log.info("rebuilt working memory of %s/%s: %d items", self.ns, robot.name, len(keep))
        return result

    # --- changes ---------------------------------------------------------------------------

    async def place(
        self,
        robot: Robot,
        placements: list[Placement],
        from_recall: bool = False,
        *,
        durable: bool = True,
    ) -> dict[str, WorkingMemoryOutcome]:
        """Put memories in the robot's working memory, evicting by policy; record membership.
        durable=False when the transaction changes nothing else a client is told is stored
        (a recall; an add after its memories committed): its commit then does not wait for
        the WAL flush (app.db.sql.RELAXED_FLUSH_CTE)."""
        if not placements:
            return {}
        now_us = to_us(self.res.clock())
        # Distinct, increasing added_at keeps a batch's own order among equal importances.
        items = [
            WMItem(
                p.key, p.content, p.tokens, p.importance, now_us + i, now_us // 1000, from_recall
            )
            for i, p in enumerate(placements)
        ]
        try:
            result = await self._call(
                robot, lambda: self.store.place(self.ns, robot.name, items, robot.budget)
            )
        except RedisUnavailable:
            return {
                p.key: WorkingMemoryOutcome(admitted=False, reason="unavailable")
                for p in placements
            }
        admitted = set(result.admitted)
        members = [
            (it.key, from_us(it.added_at_us), from_us(it.last_access_ms * 1000), from_recall)
            for it in items
            if it.key in admitted
        ]
        evicted_ids = await self.members.record(
            self.caller.namespace_id,
            robot.id,
            result.seq,
            members,
            result.evicted + result.rejected,
            durable=durable,
        )
        by_key = {p.key: p.memory_id for p in placements}
        evicted_ids = [i for i in evicted_ids if i not in {by_key[k] for k in result.rejected}]
        await self.events.record(
            self.caller.namespace_id, "evict", robot.id, evicted_ids, durable=durable
        )
        out = {}
        for p in placements:
            if p.key in admitted:
                out[p.key] = WorkingMemoryOutcome(admitted=True, evicted=result.evicted)
            elif p.key in result.rejected:
                out[p.key] = WorkingMemoryOutcome(admitted=False, reason="too_large")
            else:  # admitted, then evicted by a later item of the same call
                out[p.key] = WorkingMemoryOutcome(
                    admitted=False, reason="evicted", evicted=result.evicted
                )
        return out

    async def apply_budget(self, robot: Robot) -> list[str]:
        """After a budget change: evict down to the new budget now, not at the next add."""
        try:
            result = await self._call(
                robot, lambda: self.store.place(self.ns, robot.name, [], robot.budget)
            )
        except RedisUnavailable:
            return []  # the next rebuild applies the budget
        evicted_ids = await self.members.record(
            self.caller.namespace_id, robot.id, result.seq, [], result.evicted
        )
        await self.events.record(self.caller.namespace_id, "evict", robot.id, evicted_ids)
        return result.evicted

    async def touch(self, robot: Robot, memory_id: int, key: str) -> bool:
        # Redis keeps last access in milliseconds; Postgres gets the same instant, so a
        # rebuild or a degraded read shows what Redis showed.
        now_ms = to_us(self.res.clock()) // 1000
        now = from_us(now_ms * 1000)
        try:
            present = await self._call(
                robot, lambda: self.store.touch(self.ns, robot.name, key, now_ms)
            )
        except RedisUnavailable:
            present = True  # Postgres still learns of the access
            await self._mark_stale([robot.id], [robot.name])
        if present:
            await self.members.touch(robot.id, memory_id, now)
        return present

    async def remove_everywhere(self, memory_id: int, key: str) -> None:
        """A forgotten or replaced memory leaves the working memory of every robot holding it."""
        holders = await self.members.holders(memory_id)
        missed: list[tuple[int, str]] = []
        for robot_id, name in holders:
            try:
                if self.res.redis_breaker.open:
                    raise RedisUnavailable("redis marked down")
                await self.store.remove(self.ns, name, [key])
            except WorkingMemoryNotInitialized:
                pass  # rebuilt later from Postgres, which no longer lists it
            except (RedisUnavailable, *UNAVAILABLE) as exc:
                log.warning("redis unavailable removing %s from %s: %s", key, name, exc)
                missed.append((robot_id, name))
        await self.members.leave(memory_id)
        if missed:
            await self._mark_stale([i for i, _ in missed], [n for _, n in missed])

    async def clear(self, robot: Robot) -> int:
        try:
            removed = await self._call(robot, lambda: self.store.clear(self.ns, robot.name))
        except RedisUnavailable:
            removed = len(await self.members.members(robot.id))
            await self._mark_stale([robot.id], [robot.name])
        await self.members.clear(robot.id)
        return removed

    # --- reads -----------------------------------------------------------------------------

    async def snapshot(self, robot: Robot) -> tuple[list[WMItem], int, bool]:
        """Items in eviction order, token total, and whether this came from Postgres (degraded)."""
        try:
            items, tokens = await self._call(
                robot, lambda: self.store.snapshot(self.ns, robot.name)
            )
            return items, tokens, False
        except RedisUnavailable:
            items = await self._membership_items(robot)
            return items, sum(i.tokens for i in items), True

    async def _membership_items(self, robot: Robot) -> list[WMItem]:
        """The working set as Postgres knows it, in eviction order (serving while Redis is down)."""
        rows = await self.members.members(robot.id)
        items = [
            WMItem(
                r.key,
                r.content,
                r.token_count,
                r.importance,
                to_us(r.added_at),
                to_us(r.last_access_at) // 1000,
                r.from_recall,
            )
            for r in rows
        ]
        items.sort(key=lambda i: (i.importance, i.added_at_us, i.key))
        return items

    async def context(
        self, robot: Robot, strategy: Strategy, max_tokens: int
    ) -> tuple[ContextResult, bool]:
        """The strategy's context and whether it came from Postgres (degraded). Redis orders
        and cuts (the context script); assemble() does the same over Postgres membership."""
        now_ms = to_us(self.res.clock()) // 1000
        try:
            contents, items, tokens = await self._call(
                robot,
                lambda: self.store.context(self.ns, robot.name, strategy, max_tokens, now_ms),
            )
        except RedisUnavailable:
            members = await self._membership_items(robot)
            return assemble(members, strategy, max_tokens, now_ms), True
        return ContextResult(SEPARATOR.join(contents), items, tokens, strategy), False

    async def usage(self, robot: Robot) -> tuple[int, int] | None:
        """(tokens, items) from Redis, rebuilding a lost working memory first; None while
        Redis is unreachable (the caller then reads Postgres membership: degraded)."""

        async def op() -> tuple[int, int]:
            usage = await self.store.usage(self.ns, robot.name)
            if usage is None:  # the store answers None rather than raising on NOINIT
                raise WorkingMemoryNotInitialized(self.ns, robot.name)
            return usage

        try:
            return await self._call(robot, op)
        except RedisUnavailable:
            return None
