"""A recall's load into working memory, off the request's path (issue 46).

A recall answers once its hits are known; loading them (the write protocol's placement:
the robot's lock, one script, the mirror's record, ARCHITECTURE.md "The two-tier write
protocol") is handed to `RecallLoader` and runs after, in a task per robot whose working
memory it goes to. What the protocol guarantees is unchanged: the load *is* a placement,
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
from typing import TYPE_CHECKING

from app.db.session import Sessionmaker
from app.working_memory.model import UNAVAILABLE, Placement, Scope
from app.working_memory.robots import Robot
from app.working_memory.schemas import WorkingMemoryOutcome

if TYPE_CHECKING:
    from app.working_memory.protocol import TwoTier

log = logging.getLogger(__name__)

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


def merged(placements: Sequence[Placement]) -> list[Placement]:
    """Placements one after another as one: in order, a key placed twice placed twice (the
    script places item by item, so a key still held keeps its age and one evicted meanwhile
    comes back as new, as two placements would have it); each keeps its recall's instant as
    its last access (`Placement.at`)."""
    return list(placements)


class RecallLoader:
    """Takes recalls' loads and applies them in the background, one task per working memory."""

    def __init__(self, sessionmaker: Sessionmaker, two_tier: TwoTier, *, deadline_s: float) -> None:
        self.sessionmaker = sessionmaker
        self.two_tier = two_tier
        self.deadline_ms = max(1, round(deadline_s * 1000))
        self._queues: dict[RobotKey, _Queue] = {}
        self._tasks: dict[RobotKey, asyncio.Task[None]] = {}
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
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._run(key), name=f"recall load {key}")
        return done

    async def _run(self, key: RobotKey) -> None:
        """Apply the robot's queued loads, each batch (what queued while the last ran) as
        one placement, until none is left."""
        try:
            while (queue := self._queues.pop(key, None)) is not None:
                await self._apply(key, queue)
        finally:
            del self._tasks[key]

    async def _apply(self, key: RobotKey, queue: _Queue) -> None:
        outcomes: dict[str, Outcomes] = {}
        try:
            async with self.sessionmaker() as session:
                protocol = self.two_tier.protocol(session, queue.scope, settle=False)
                for robot, loads in _runs(queue.loads):
                    out = await protocol.place(
                        robot, merged([p for ld in loads for p in ld.placements]), from_recall=True
                    )
                    self.applied += 1
                    for ld in loads:
                        outcomes[ld.token] = {p.key: out[p.key] for p in ld.placements}
        except Exception:  # the protocol never raises after a commit; the robot went away?
            log.exception("recall load of %s/%s failed", queue.scope.namespace, queue.holder.name)
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
            await asyncio.wait(list(self._tasks.values()), timeout=left)
        if self._tasks:
            log.warning("%d recall loads not applied at shutdown", self.queued)
            for task in list(self._tasks.values()):
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)


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
