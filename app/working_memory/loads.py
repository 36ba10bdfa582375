"""A recall's load into working memory, off the request's path (issue 46).

A recall answers once its hits are known; loading them (the write protocol's placement:
the robot's lock, one script, the mirror's record, ARCHITECTURE.md "The two-tier write
protocol") is handed to `RecallLoader` and runs after, in one of two tasks that apply the
queued loads working memory by working memory, each on one session while there is work.
What the protocol guarantees is unchanged: the load *is* a placement,
through `WriteProtocol.place`, in a session of its own.

Read-your-writes: a read of that working memory issued after the recall's response sees the
hits.
- In this process, every read and every change of the robot's working memory first waits
  for the loads this process took before it (`PendingLoads.settle`, called by
  `WorkingMemoryService` and `RobotSync`): no polling, and a change cannot overtake a load.
- In every process, the recall marks the load pending in Redis before it answers
  (`WorkingMemoryStore.mark_pending`: the robot's `pending` sorted set, with a deadline in
  Redis's clock); the read scripts (snapshot, outline, context) reply PENDING while a load is,
  and the store waits and asks again. The loader removes the mark once the placement
  committed. A process that dies with loads pending loses them (they were never
  acknowledged: the response said `pending`); the marks lapse at their deadline
  (`HTM_RECALL_LOAD_DEADLINE_S`), and reads stop waiting then.

Coalescing: the loads queued for one robot while its previous one ran are applied as one
placement (their placements in order, each with its recall's instant as last access; the
script places item by item): what placing them one after another leaves, in one lock, one
script and one record (`tests/recall/test_recall_background_load.py` checks the equality).

Shutdown: `drain` waits for every queued load (the lifespan calls it before closing the
connections).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.db.session import DbSession, Sessionmaker
from app.working_memory.model import UNAVAILABLE, Placement, RedisBreaker, Scope
from app.working_memory.robots import Robot
from app.working_memory.schemas import WorkingMemoryOutcome
from app.working_memory.store import WorkingMemoryStore

log = logging.getLogger(__name__)

# Tasks applying loads at most (each holds one connection while there is work).
LOADERS = 2
RobotKey = tuple[int, int]  # (namespace id, id of the robot whose working memory it is)
Outcomes = dict[str, WorkingMemoryOutcome]


class PendingLoads:
    """This process's recall loads not applied yet, per working memory: what a read or a
    change of that working memory waits for first."""

    def __init__(self) -> None:
        self._waiting: dict[RobotKey, list[asyncio.Future[Outcomes]]] = {}

    def add(self, key: RobotKey, done: asyncio.Future[Outcomes]) -> None:
        self._waiting.setdefault(key, []).append(done)

    def remove(self, key: RobotKey, done: asyncio.Future[Outcomes]) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.remove(done)
            if not waiting:
                del self._waiting[key]

    async def settle(self, namespace_id: int, robot_id: int) -> None:
        """Wait until the loads taken before this call for that working memory are applied
        (or given up). A cancelled caller does not cancel them."""
        waiting = self._waiting.get((namespace_id, robot_id))
        if waiting:
            await asyncio.wait([asyncio.shield(f) for f in list(waiting)])

    def __len__(self) -> int:
        return sum(len(w) for w in self._waiting.values())


class _Placing(Protocol):
    async def place(
        self, robot: Robot, placements: Sequence[Placement], *, from_recall: bool = False
    ) -> Outcomes: ...


class Tiers(Protocol):
    """What the loader uses of `protocol.TwoTier` (named here: protocol.py imports this
    module)."""

    @property
    def store(self) -> WorkingMemoryStore: ...
    @property
    def breaker(self) -> RedisBreaker: ...
    @property
    def pending(self) -> PendingLoads: ...
    def protocol(self, session: DbSession, scope: Scope, *, settle: bool = True) -> _Placing: ...


@dataclass
class _Load:
    robot: Robot  # the robot that recalled (a group member loads into the group's)
    placements: list[Placement]
    token: str
    done: asyncio.Future[Outcomes]


@dataclass
class _Queue:
    scope: Scope
    holder: Robot
    loads: list[_Load] = field(default_factory=list)


class RecallLoader:
    """Takes recalls' loads and applies them in the background: at most `workers` tasks, each
    on one session while there is work (a connection per load would be more than the
    requests' own at c=8: the pool's overflow opened and closed a connection each time), a
    working memory's queue taken by one task at a time (its loads stay in order)."""

    def __init__(
        self,
        sessionmaker: Sessionmaker,
        two_tier: Tiers,
        *,
        deadline_s: float,
        workers: int = LOADERS,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.two_tier = two_tier
        self.deadline_ms = max(1, round(deadline_s * 1000))
        self.workers = workers
        self._queues: dict[RobotKey, _Queue] = {}  # in the order they were first queued
        self._busy: set[RobotKey] = set()  # queues a task is applying now
        self._tasks: set[asyncio.Task[None]] = set()
        self.applied = 0  # placements run (one per batch of coalesced loads): tests, /metrics

    async def submit(
        self, scope: Scope, robot: Robot, placements: Sequence[Placement]
    ) -> asyncio.Future[Outcomes]:
        """Queue the load, marked pending in Redis first (for the other processes' reads);
        returns when it is queued, with a future of its outcomes."""
        holder = robot.working_memory
        key = (scope.namespace_id, holder.id)
        token = uuid.uuid4().hex
        store, breaker = self.two_tier.store, self.two_tier.breaker
        if not breaker.open:
            try:
                await store.mark_pending(scope.namespace, holder.name, token, self.deadline_ms)
            except UNAVAILABLE as exc:  # the placement will find Redis down too
                breaker.trip()
                where = f"{scope.namespace}/{holder.name}"
                log.warning("recall load of %s not marked: %s", where, exc)
        done: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
        self.two_tier.pending.add(key, done)
        queue = self._queues.setdefault(key, _Queue(scope, holder))
        queue.loads.append(_Load(robot, list(placements), token, done))
        if len(self._tasks) < min(self.workers, len(self._queues) + len(self._busy)):
            self._tasks.add(asyncio.create_task(self._work(), name="recall loads"))
        return done

    def _next(self) -> tuple[RobotKey, _Queue] | None:
        """The longest-waiting queue no task is applying, taken out."""
        for key in self._queues:
            if key not in self._busy:
                return key, self._queues.pop(key)
        return None

    async def _work(self) -> None:
        """Apply queues until none is left that another task is not applying; each queue's
        loads (what queued while the last batch ran) as one placement. The task leaves the
        set the moment it finds nothing to take (no await between): a load queued after that
        starts a task of its own."""
        try:
            while (taken := self._next()) is not None:
                async with self.sessionmaker() as session:
                    while taken is not None:
                        key, queue = taken
                        self._busy.add(key)
                        try:
                            await self._apply(session, key, queue)
                        finally:
                            self._busy.discard(key)
                        taken = self._next()
        finally:
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _apply(self, session: DbSession, key: RobotKey, queue: _Queue) -> None:
        outcomes: dict[str, Outcomes] = {}
        try:
            protocol = self.two_tier.protocol(session, queue.scope, settle=False)
            for robot, loads in _runs(queue.loads):
                # Placements one after another as one: in order, a key placed twice placed
                # twice (the script places item by item, so a key still held keeps its age and
                # one evicted meanwhile comes back as new); each keeps its recall's instant as
                # its last access (`Placement.at`).
                placements = [p for ld in loads for p in ld.placements]
                out = await protocol.place(robot, placements, from_recall=True)
                self.applied += 1
                for ld in loads:
                    outcomes[ld.token] = {p.key: out[p.key] for p in ld.placements}
        except Exception:  # the protocol never raises after a commit; the robot went away?
            log.exception("recall load of %s/%s failed", queue.scope.namespace, queue.holder.name)
            await session.rollback()
        finally:
            await self._unmark(queue)
            for ld in queue.loads:
                self.two_tier.pending.remove(key, ld.done)
                if not ld.done.done():
                    ld.done.set_result(outcomes.get(ld.token, _unavailable(ld.placements)))

    async def _unmark(self, queue: _Queue) -> None:
        if self.two_tier.breaker.open:
            return  # the marks lapse at their deadline
        try:
            await self.two_tier.store.unmark_pending(
                queue.scope.namespace, queue.holder.name, [ld.token for ld in queue.loads]
            )
        except UNAVAILABLE as exc:
            log.warning("recall load marks of %s left to lapse: %s", queue.holder.name, exc)

    @property
    def queued(self) -> int:
        return len(self.two_tier.pending)

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most timeout_s) until every queued load is applied: at shutdown, before
        the connections close. What is left then is given up, logged (never acknowledged)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self._tasks and (left := end - loop.time()) > 0:
            await asyncio.wait(list(self._tasks), timeout=left)
        if self._tasks:
            log.warning("%d recall loads not applied at shutdown", self.queued)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _runs(loads: list[_Load]) -> list[tuple[Robot, list[_Load]]]:
    """Consecutive loads by the same robot, grouped (a group's members place as themselves)."""
    runs: list[tuple[Robot, list[_Load]]] = []
    for ld in loads:
        if runs and runs[-1][0].id == ld.robot.id:
            runs[-1][1].append(ld)
        else:
            runs.append((ld.robot, [ld]))
    return runs


def _unavailable(placements: Sequence[Placement]) -> Outcomes:
    return {p.key: WorkingMemoryOutcome(admitted=False, reason="unavailable") for p in placements}
