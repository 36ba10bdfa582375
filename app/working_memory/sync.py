"""The step every working-memory change shares: lock the robot's row, run one Lua script,
check that the (gen, seq) it replies follows the recorded one, and rebuild the robot from
its PostgreSQL mirror when it does not (Redis lost data, or a change went unrecorded).
protocol.py builds the operations on it; the module docstring there tells the whole protocol.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from app.db.session import DbSession
from app.errors import RemovedMeanwhile, ServiceUnavailable
from app.visibility import Reader
from app.working_memory.items import WMItem, eviction_order
from app.working_memory.loads import PendingLoads
from app.working_memory.model import (
    UNAVAILABLE,
    RedisBreaker,
    RedisUnavailable,
    RepairQueue,
    Scope,
    TierCounts,
    from_us,
    member_items,
)
from app.working_memory.readable_repository import ReadableRepository
from app.working_memory.repository import LockedRobot, MembershipRepository, Placed
from app.working_memory.robots import Robot, RobotCache
from app.working_memory.store import Change, WorkingMemoryNotInitialized, WorkingMemoryStore

log = logging.getLogger(__name__)


class Restoring(NamedTuple):
    """A snapshot's item, as a restore places it (its times as Redis keeps them)."""

    memory_id: int
    added_at_us: int
    last_access_ms: int
    from_recall: bool


class Restored(NamedTuple):
    """What a restore did: the memories placed, those skipped (no longer current) and those
    the budget evicted (ids)."""

    placed: list[int]
    skipped: list[int]
    evicted: list[int]
    tokens: int  # working memory's total after it


class _Change(Protocol):
    @property
    def change(self) -> Change: ...


R = TypeVar("R", bound=_Change)


class RobotSync:
    """One request's view of the tier in one namespace (scope), on its session."""

    def __init__(
        self,
        session: DbSession,
        store: WorkingMemoryStore,
        breaker: RedisBreaker,
        *,
        robots: RobotCache,
        repairs: RepairQueue,
        scope: Scope,
        default_budget: int,
        clock: Callable[[], datetime],
        counts: TierCounts | None = None,
        pending: PendingLoads | None = None,
    ) -> None:
        self.counts = counts if counts is not None else TierCounts()
        self.pending = pending
        self.session = session
        self.store = store
        self.breaker = breaker
        self.robots = robots
        self.repairs = repairs
        self.scope = scope
        self.default_budget = default_budget
        self.clock = clock
        self.members = MembershipRepository(session, scope.namespace_id)

    @property
    def namespace(self) -> str:
        return self.scope.namespace

    async def settle(self, robot: Robot) -> None:
        """Wait for the recall loads this process took for the robot's working memory before
        now (app/working_memory/loads.py): every read and change of it comes after them."""
        if self.pending is not None:
            await self.pending.settle(self.scope.namespace_id, robot.working_memory.id)

    async def resync(self, robot: Robot, *, force: bool = False, skip_locked: bool = False) -> bool:
        """Rebuild the robot's Redis working memory from the mirror if it is stale, missing
        or diverged (or always, with force). False if skip_locked found the robot busy."""
        state = await self.members.lock(
            self.scope.namespace_id, robot.id, self.default_budget, skip_locked=skip_locked
        )
        if state is None:
            await self.session.commit()
            return False
        try:
            current = None
            if not (force or state.stale):
                current = await self.store.state(self.namespace, robot.name)
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

    # --- snapshots: a read of the mirror under the lock, and a restore (a load) -------------

    async def held(self, robot: Robot) -> list[Any]:
        """The robot's working set as its mirror holds it (current content and version), read
        under its row lock, which the caller's transaction keeps until it commits: no change
        lands between this read and what the caller records of it."""
        owner = robot.working_memory
        await self._lock(owner, relaxed=False)
        return await self.members.members(owner.id, Reader(self.scope.namespace_id, owner.name))

    async def restore(self, robot: Robot, wanted: Sequence[Restoring]) -> Restored:
        """The robot's working memory becomes `wanted` (a snapshot's items), as a rebuild loads
        one (`_load`: load.lua, then record_load): each memory with its recorded order, last
        access and origin, and its current content; the budget's trim applies. A memory no
        longer current (forgotten, or its validity ended) is skipped. Redis unreachable: 503,
        nothing changed (the robot marked stale if the load may have run)."""
        robot = robot.working_memory
        if self.breaker.open:
            raise ServiceUnavailable("working memory (Redis) is unavailable: retry")
        state = await self._lock(robot, relaxed=False)
        reader = Reader(self.scope.namespace_id, robot.name)  # what it may read now
        rows = await ReadableRepository(self.session).restorable(
            [w.memory_id for w in wanted], reader
        )
        items = [
            WMItem(r.key, r.content, r.token_count, r.importance, w.added_at_us,
                   w.last_access_ms, w.from_recall, r.id)
            for w in wanted if (r := rows.get(w.memory_id)) is not None
        ]  # fmt: skip
        try:
            _, _, evicted = await self._load(
                robot, state, items, {r.id: r.created_at for r in rows.values()}
            )
        except UNAVAILABLE as exc:
            self.breaker.trip()
            await self._mark_stale(robot)
            await self._commit_or_queue(robot)
            raise ServiceUnavailable("working memory (Redis) is unavailable: retry") from exc
        self.breaker.reset()
        await self.session.commit()
        self.robots.put(self.scope.namespace_id, replace(robot, stale=False))
        skipped = [w.memory_id for w in wanted if w.memory_id not in rows]
        kept = [i for i in items if i.memory_id not in evicted]
        return Restored([i.memory_id for i in kept], skipped, evicted, sum(i.tokens for i in kept))

    # --- the mirror step's machinery ---------------------------------------------------------

    async def _lock(
        self,
        robot: Robot,
        memories: Sequence[tuple[int, datetime, int]] = (),
        *,
        relaxed: bool = True,
    ) -> LockedRobot:
        await self.settle(robot)
        state = await self.members.lock(
            self.scope.namespace_id, robot.id, self.default_budget, memories, relaxed=relaxed
        )
        if state is None:  # removed (DELETE /v1/robots/{robot}) after it was read
            self.robots.forget(self.scope.namespace_id, robot.name)
            raise RemovedMeanwhile(f"robot {robot.name!r} was removed meanwhile: retry")
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
            if result is None or result.change != next_change(state):
                if result is not None:
                    log.warning(
                        "working memory of %s/%s replied %s after %s: rebuilding",
                        self.namespace,
                        robot.name,
                        result.change,
                        state.change,
                    )
                state, rebuilt = await self._rebuild(robot, state), True
                if not redo_after_rebuild:
                    return None, True
                result = await op(state.budget)
                if result.change != next_change(state):
                    where = f"{self.namespace}/{robot.name}"
                    raise RuntimeError(f"working memory of {where} moved under lock")
        except UNAVAILABLE as exc:
            self.breaker.trip()
            log.warning("redis unavailable for %s/%s: %s", self.namespace, robot.name, exc)
            await self._mark_stale(robot)
            raise RedisUnavailable(str(exc)) from exc
        self.breaker.reset()
        return result, rebuilt

    async def _rebuild(self, robot: Robot, state: LockedRobot) -> LockedRobot:
        """Load the robot's Redis working memory from the mirror (current content), trimmed to
        the budget by the eviction policy, and record the new generation."""
        reader = Reader(self.scope.namespace_id, robot.name)
        rows = await self.members.members(robot.id, reader, for_rebuild=True)
        state, kept, _ = await self._load(
            robot, state, member_items(rows), {r.id: r.created_at for r in rows}
        )
        if rows:
            self.counts.rebuilds += 1
            log.info("rebuilt working memory of %s/%s: %d items", self.namespace, robot.name, kept)
        return state

    async def _load(
        self,
        robot: Robot,
        state: LockedRobot,
        items: list[WMItem],
        created: dict[int, datetime],
    ) -> tuple[LockedRobot, int, list[int]]:
        """Under the robot's lock: Redis's working memory becomes `items` (load.lua: a new
        generation), trimmed to the budget by the eviction policy, and the mirror records
        exactly that (record_load). `created`: each memory's created_at. Returns the new
        state, how many items were kept and the ids evicted."""
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
        result = await self.store.load(self.namespace, robot.name, keep, state.budget)
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
            placed=placed,
            evicted=evicted,
            at=self.clock() if evicted else None,
            was_stale=state.stale,
        )
        self.counts.evictions += len(evicted)
        return replace(state, stale=False, gen=result.gen, seq=result.seq), len(keep), evicted

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
                self.namespace,
                robot.name,
                exc.detail,
            )
        else:
            log.exception(
                "working-memory change of %s/%s failed; to repair", self.namespace, robot.name
            )
        self.repairs.add(self.scope.namespace_id, self.namespace, robot.id, robot.name)
        self.robots.forget(self.scope.namespace_id, robot.name)
        try:
            await self.session.rollback()
        except Exception:
            log.warning("rollback after a failed working-memory change failed too")


def next_change(state: LockedRobot) -> Change:
    """The change that must follow the recorded one."""
    assert state.gen is not None and state.seq is not None
    return Change(state.gen, state.seq + 1)
