"""The two-tier write protocol: the one way a robot's working memory changes.

Every change (add, batch, upsert, recall loading, retrieve touch, forget, clear, budget) goes
through `WriteProtocol`, in this order:

1. Durable. The caller's PostgreSQL transaction commits (`commit_durable`): memories added,
   replaced or forgotten, a budget set. A replace or forget first locks the memory's row
   (FOR UPDATE) and, in the same transaction, marks the membership row of every robot that
   holds the memory stale (`MembershipRepository.mark_holders_stale`).
2. Redis. Under the robot's row lock (`MembershipRepository.lock`), one Lua script.
3. Mirror. What the script did and the (gen, seq) it replied are recorded in PostgreSQL, and
   the lock's transaction commits.

Why the locks:

- The robot's row lock orders a robot's changes identically in Redis and in PostgreSQL, so
  after each change the membership mirror equals Redis, and the recorded (gen, seq) says
  what Redis must hold: the next change must reply (gen, seq + 1). Any other reply means
  Redis lost data (a restart, a failover to a lagging replica, an fsync-per-second AOF) or
  a change went unrecorded (PostgreSQL failed after the script): the robot's working memory
  is rebuilt from PostgreSQL, which is right by construction.
- A placement locks the memories it places FOR KEY SHARE, at the version it read; a replace
  or forget takes FOR UPDATE. So a placement either commits before the replace marks the
  holders (and is withdrawn with them), or sees the new version or the delete and skips the
  memory: old content is never placed after the change that replaced it.

After step 1 nothing answers 5xx for the change: a failure in steps 2-3 is reported as
`working_memory.reason = "unavailable"`; the robot is marked stale (or, when PostgreSQL
cannot take even that, queued in this process) and rebuilt when Redis answers again, by the
next change or read of that robot or by the repair worker (app/working_memory/repair.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from redis.exceptions import RedisError

from app.db.session import DbSession
from app.errors import ServiceUnavailable
from app.memories.schemas import WorkingMemoryOutcome
from app.robots.cache import Robot, RobotCache
from app.working_memory.repository import LockedRobot, MembershipRepository, Placed
from app.working_memory.store import (
    Change,
    PlaceResult,
    RemoveResult,
    WMItem,
    WorkingMemoryNotInitialized,
    WorkingMemoryStore,
    eviction_order,
)

log = logging.getLogger(__name__)

# Errors that mean "Redis is not there right now" rather than a bug.
UNAVAILABLE = (RedisError, OSError, TimeoutError)


def to_us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, UTC)


class RedisUnavailable(Exception):
    pass


def member_items(rows: Sequence[Any]) -> list[WMItem]:
    """Mirror rows (MembershipRepository.members) as the items Redis holds for them."""
    return [
        WMItem(
            r.key,
            r.content,
            r.token_count,
            r.importance,
            to_us(r.added_at),
            to_us(r.last_access_at) // 1000,
            r.from_recall,
            r.id,
        )
        for r in rows
    ]


class Breaker(Protocol):
    """After a Redis failure, skip Redis for a short while (app.resources.RedisBreaker)."""

    @property
    def open(self) -> bool: ...

    def trip(self) -> None: ...

    def reset(self) -> None: ...


@dataclass
class RepairQueue:
    """Robots whose working memory may be out of line with the mirror where PostgreSQL could
    not even record that (it failed after the Redis script). Process-local; the repair
    worker rebuilds them once PostgreSQL answers."""

    robots: dict[int, tuple[int, str, str]] = field(default_factory=dict)

    def add(self, namespace_id: int, namespace: str, robot_id: int, robot: str) -> None:
        self.robots[robot_id] = (namespace_id, namespace, robot)

    def take(self) -> list[tuple[int, int, str, str]]:
        taken = [(rid, *rest) for rid, rest in self.robots.items()]
        self.robots.clear()
        return taken


@dataclass(frozen=True)
class Placement:
    """A memory to place, as read at `version`."""

    memory_id: int
    created_at: datetime
    version: int
    key: str
    content: str
    tokens: int
    importance: float


@dataclass(frozen=True)
class Holder:
    robot_id: int
    robot: str


@dataclass(frozen=True)
class Scope:
    """The namespace a protocol instance works in: Redis keys use its name, rows its id."""

    namespace_id: int
    namespace: str


class _Change(Protocol):
    @property
    def change(self) -> Change: ...


R = TypeVar("R", bound=_Change)


class WriteProtocol:
    def __init__(
        self,
        session: DbSession,
        store: WorkingMemoryStore,
        breaker: Breaker,
        robots: RobotCache,
        repairs: RepairQueue,
        scope: Scope,
        *,
        default_budget: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.session = session
        self.store = store
        self.breaker = breaker
        self.robots = robots
        self.repairs = repairs
        self.scope = scope
        self.default_budget = default_budget
        self.clock = clock
        self.members = MembershipRepository(session)

    @property
    def ns(self) -> str:
        return self.scope.namespace

    # --- step 1 -------------------------------------------------------------------------

    async def mark_holders(self, memory_id: int) -> list[Holder]:
        """In a replace's or forget's durable transaction, after it locked the memory's row
        (FOR UPDATE): every robot holding the memory owes its withdrawal. Pass the result to
        `withdraw` once the transaction committed."""
        rows = await self.members.mark_holders_stale(memory_id)
        return [Holder(r.id, r.name) for r in rows]

    async def moved(self, memory_id: int, created_at: datetime) -> None:
        """In a replace's durable transaction: the memory moved in time."""
        await self.members.move(memory_id, created_at)

    async def commit_durable(self) -> None:
        """Commit the caller's transaction, waiting for the WAL flush: after this the change
        is acknowledged, and nothing that follows may fail the request."""
        await self.session.commit()

    # --- changes --------------------------------------------------------------------------

    async def place(
        self, robot: Robot, placements: Sequence[Placement], *, from_recall: bool = False
    ) -> dict[str, WorkingMemoryOutcome]:
        """Put memories in the robot's working memory, evicting by policy, and record it.
        A memory replaced or forgotten since it was read is skipped (`superseded`)."""
        if not placements:
            return {}
        if self.breaker.open:
            return _all(placements, "unavailable")
        try:
            state = await self._lock(
                robot, [(p.memory_id, p.created_at, p.version) for p in placements]
            )
            live = [p for p in placements if p.memory_id in state.live]
            out = {
                p.key: WorkingMemoryOutcome(admitted=False, reason="superseded")
                for p in placements
                if p.memory_id not in state.live
            }
            if live:
                out.update(await self._place_live(robot, state, live, from_recall))
            await self.session.commit()
            return out
        except RedisUnavailable:
            await self._commit_or_queue(robot)
            return _all(placements, "unavailable")
        except Exception:
            await self._failed(robot)
            return _all(placements, "unavailable")

    async def _place_live(
        self, robot: Robot, state: LockedRobot, live: list[Placement], from_recall: bool
    ) -> dict[str, WorkingMemoryOutcome]:
        now = self.clock()
        now_us = to_us(now)
        # Distinct, increasing added_at keeps a batch's own order among equal importances.
        items = [
            WMItem(
                p.key,
                p.content,
                p.tokens,
                p.importance,
                now_us + i,
                now_us // 1000,
                from_recall,
                p.memory_id,
            )
            for i, p in enumerate(live)
        ]
        result, _ = await self._run(
            robot, state, lambda budget: self.store.place(self.ns, robot.name, items, budget)
        )
        assert result is not None
        by_key = {p.key: p for p in live}
        placed = [
            Placed(
                by_key[k].memory_id,
                by_key[k].created_at,
                from_us(added),
                from_us(access * 1000),
                from_recall,
            )
            for k, (added, access) in result.placed.items()
        ]
        await self._record_place(robot, result, placed, now)
        out = {}
        for p in live:
            if p.key in result.placed:
                out[p.key] = WorkingMemoryOutcome(admitted=True, evicted=result.evicted)
            elif p.key in result.rejected:
                out[p.key] = WorkingMemoryOutcome(admitted=False, reason="too_large")
            else:  # admitted, then evicted by a later item of the same call
                out[p.key] = WorkingMemoryOutcome(
                    admitted=False, reason="evicted", evicted=result.evicted
                )
        return out

    async def _record_place(
        self, robot: Robot, result: PlaceResult, placed: list[Placed], at: datetime | None
    ) -> None:
        present = {p.memory_id for p in placed}
        departed = [i for i in (*result.evicted_ids, *result.departed_ids) if i not in present]
        await self.members.record_place(
            self.scope.namespace_id,
            robot.id,
            Change(result.gen, result.seq),
            placed,
            departed,
            [i for i in result.evicted_ids if i not in present],
            at,
        )

    async def apply_budget(self, robot: Robot) -> list[str]:
        """After a budget change committed: evict down to the new budget now."""
        if self.breaker.open:
            return await self._mark_stale_alone(robot)
        try:
            state = await self._lock(robot)
            result, _ = await self._run(
                robot, state, lambda budget: self.store.place(self.ns, robot.name, [], budget)
            )
            assert result is not None
            await self._record_place(robot, result, [], self.clock())
            await self.session.commit()
            return result.evicted
        except RedisUnavailable:
            await self._commit_or_queue(robot)  # marked stale: the rebuild applies the budget
        except Exception:
            await self._failed(robot)
        return []

    async def withdraw(self, holders: Sequence[Holder], memory_id: int, key: str) -> None:
        """After a replace or forget committed (and marked `holders` stale): the memory's old
        copy leaves each holder's Redis, then its mirror. A holder that cannot be reached now
        stays marked and is repaired later."""
        for holder in sorted(holders, key=lambda h: h.robot_id):
            robot = Robot(holder.robot_id, holder.robot, self.default_budget)
            if self.breaker.open:
                await self._mark_stale_alone(robot)
                continue
            try:
                state = await self._lock(robot)
                if await self.members.is_stale_member(robot.id, memory_id):
                    result, _ = await self._run(
                        robot,
                        state,
                        self._remover(robot.name, key, memory_id),
                        redo_after_rebuild=False,
                    )
                    if result is not None:  # else a rebuild wrote current content, unmarked
                        await self.members.record_removal(robot.id, result.change, [memory_id])
                await self.session.commit()
            except RedisUnavailable:
                await self._commit_or_queue(robot)
            except Exception:
                await self._failed(robot)

    def _remover(
        self, robot: str, key: str, memory_id: int
    ) -> Callable[[int], Awaitable[RemoveResult]]:
        return lambda _budget: self.store.remove(self.ns, robot, [(key, memory_id)])

    async def clear(self, robot: Robot) -> int:
        """Empty the robot's working memory. Durable: a client is told it is done. With Redis
        unreachable the mirror is emptied and the robot marked stale (rebuilt empty later)."""
        state = await self._lock(robot, relaxed=False)
        if self.breaker.open:
            await self._mark_stale(robot)
        else:
            try:
                result, _ = await self._run(
                    robot, state, lambda _budget: self.store.clear(self.ns, robot.name)
                )
                assert result is not None
                await self.members.record_clear(robot.id, result.change)
                await self.session.commit()
                return result.count
            except RedisUnavailable:
                pass  # marked stale in this transaction
            except Exception:
                # Not acknowledged (the client gets the error): if Redis was cleared, the
                # rebuild puts back what the mirror still lists.
                self.repairs.add(self.scope.namespace_id, self.ns, robot.id, robot.name)
                raise
        count = await self.members.record_clear(robot.id, None)
        await self.session.commit()
        return count

    async def touch(self, robot: Robot, memory_id: int, key: str) -> None:
        """An access by a retrieve. Not a change of the working set: no lock, no seq; both
        tiers only ever move a last access forward."""
        now_ms = to_us(self.clock()) // 1000
        at = from_us(now_ms * 1000)  # Postgres gets the instant Redis keeps (ms)
        found: int | None = None
        reached = False
        if not self.breaker.open:
            try:
                try:
                    found = await self.store.touch(self.ns, robot.name, key, now_ms)
                except WorkingMemoryNotInitialized:
                    await self.resync(robot)
                    found = await self.store.touch(self.ns, robot.name, key, now_ms)
                self.breaker.reset()
                reached = True
            except (RedisUnavailable, *UNAVAILABLE) as exc:
                self.breaker.trip()
                log.warning("redis unavailable touching %s/%s: %s", self.ns, robot.name, exc)
        if not reached:
            # Postgres still learns of the access; Redis, when back, is rebuilt from it.
            await self._mark_stale(robot)
            await self.members.touch(robot.id, memory_id, at)
        elif found == memory_id:
            await self.members.touch(robot.id, memory_id, at)

    async def resync(self, robot: Robot, *, force: bool = False, skip_locked: bool = False) -> bool:
        """Rebuild the robot's Redis working memory from the mirror if it is stale, missing
        or diverged (or always, with force). False if skip_locked found the robot busy."""
        state = await self.members.lock(robot.id, self.default_budget, skip_locked=skip_locked)
        if state is None:
            await self.session.commit()
            return False
        try:
            current = None if force or state.stale else await self.store.state(self.ns, robot.name)
            if current is None or current[2] != state.change:
                await self._rebuild(robot, state)
            self.breaker.reset()
        except UNAVAILABLE as exc:
            self.breaker.trip()
            await self._mark_stale(robot)  # a load may have run: rebuild again when it answers
            await self._commit_or_queue(robot)
            raise RedisUnavailable(str(exc)) from exc
        await self.session.commit()
        self.robots.put(self.scope.namespace_id, replace(robot, stale=False))
        return True

    # --- the mirror step's machinery ---------------------------------------------------------

    async def _lock(
        self,
        robot: Robot,
        memories: Sequence[tuple[int, datetime, int]] = (),
        *,
        relaxed: bool = True,
    ) -> LockedRobot:
        state = await self.members.lock(robot.id, self.default_budget, memories, relaxed=relaxed)
        if state is None:  # robots are never deleted through the API
            raise RuntimeError(f"robot {self.ns}/{robot.name} does not exist")
        return state

    async def _run(
        self,
        robot: Robot,
        state: LockedRobot,
        op: Callable[[int], Awaitable[R]],
        *,
        redo_after_rebuild: bool = True,
    ) -> tuple[R | None, bool]:
        """Run one script (op takes the budget) under the robot's lock so that its change
        follows the recorded one: rebuild first when the robot is stale or never recorded,
        and when the script finds the robot missing or replies another (gen, seq) than the
        recorded one's successor (Redis lost data, or a change went unrecorded), rebuild and
        run it again. With redo_after_rebuild=False an op that met a rebuild is not run (a
        withdrawal: the rebuild did its work) and the result is None. Returns the result and
        whether a rebuild happened. When Redis fails, the robot is marked stale in this
        transaction and RedisUnavailable raised."""
        rebuilt = False
        try:
            if state.stale or state.change is None:
                state, rebuilt = await self._rebuild(robot, state), True
                if not redo_after_rebuild:
                    return None, True
            try:
                result: R | None = await op(state.budget)
            except WorkingMemoryNotInitialized:
                result = None
            if result is None or result.change != _next(state):
                if result is not None:
                    log.warning(
                        "working memory of %s/%s replied %s after %s: rebuilding",
                        self.ns,
                        robot.name,
                        result.change,
                        state.change,
                    )
                state, rebuilt = await self._rebuild(robot, state), True
                if not redo_after_rebuild:
                    return None, True
                result = await op(state.budget)
                if result.change != _next(state):
                    raise RuntimeError(f"working memory of {self.ns}/{robot.name} moved under lock")
        except UNAVAILABLE as exc:
            self.breaker.trip()
            log.warning("redis unavailable for %s/%s: %s", self.ns, robot.name, exc)
            await self._mark_stale(robot)
            raise RedisUnavailable(str(exc)) from exc
        self.breaker.reset()
        return result, rebuilt

    async def _rebuild(self, robot: Robot, state: LockedRobot) -> LockedRobot:
        """Load the robot's Redis working memory from the mirror (current content), trimmed to
        the budget by the eviction policy, and record the new generation."""
        rows = await self.members.members(robot.id, for_rebuild=True)
        items = member_items(rows)
        # The budget may have shrunk since these were placed. load() places in the order
        # given and would evict among the items placed so far; trim by the eviction policy
        # over the whole set instead (lowest importance, then oldest), as place() would.
        total = sum(i.tokens for i in items)
        victims: set[int] = set()
        for it in eviction_order(items):
            if total <= state.budget:
                break
            victims.add(it.memory_id)
            total -= it.tokens
        keep = [i for i in items if i.memory_id not in victims]
        result = await self.store.load(self.ns, robot.name, keep, state.budget)
        created = {r.id: r.created_at for r in rows}
        by_key = {i.key: i for i in keep}
        placed = [
            Placed(
                by_key[k].memory_id,
                created[by_key[k].memory_id],
                from_us(added),
                from_us(access * 1000),
                by_key[k].from_recall,
            )
            for k, (added, access) in result.placed.items()
        ]
        evicted = [*victims, *result.evicted_ids]
        await self.members.record_load(
            self.scope.namespace_id,
            robot.id,
            Change(result.gen, result.seq),
            placed,
            evicted,
            self.clock() if evicted else None,
        )
        if rows:
            log.info("rebuilt working memory of %s/%s: %d items", self.ns, robot.name, len(keep))
        return replace(state, stale=False, gen=result.gen, seq=result.seq)

    async def _mark_stale(self, robot: Robot) -> None:
        await self.members.mark_robot_stale(robot.id)
        self.robots.forget(self.scope.namespace_id, robot.name)

    async def _mark_stale_alone(self, robot: Robot) -> list[str]:
        """Redis is known to be down: record that the robot must be rebuilt."""
        try:
            await self._mark_stale(robot)
            await self.session.commit()
        except Exception:
            await self._failed(robot)
        return []

    async def _commit_or_queue(self, robot: Robot) -> None:
        try:
            await self.session.commit()
        except Exception:
            await self._failed(robot)

    async def _failed(self, robot: Robot) -> None:
        """A mirror step failed after (or without) its Redis script: what Redis holds is
        unknown to Postgres. Never fails the request; the repair worker rebuilds. Called from
        an `except` block: an outage is logged as one line, anything else with its trace."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ServiceUnavailable):  # the database is down or timed out
            log.warning(
                "working-memory change of %s/%s not recorded (%s); to repair",
                self.ns,
                robot.name,
                exc.detail,
            )
        else:
            log.exception("working-memory change of %s/%s failed; to repair", self.ns, robot.name)
        self.repairs.add(self.scope.namespace_id, self.ns, robot.id, robot.name)
        self.robots.forget(self.scope.namespace_id, robot.name)
        try:
            await self.session.rollback()
        except Exception:
            log.warning("rollback after a failed working-memory change failed too")


def _next(state: LockedRobot) -> Change:
    """The change that must follow the recorded one."""
    assert state.gen is not None and state.seq is not None
    return Change(state.gen, state.seq + 1)


def _all(placements: Sequence[Placement], reason: str) -> dict[str, WorkingMemoryOutcome]:
    return {p.key: WorkingMemoryOutcome(admitted=False, reason=reason) for p in placements}  # type: ignore[arg-type]
