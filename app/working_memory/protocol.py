"""The two-tier write protocol: the one way a robot's working memory changes (add, batch,
upsert, recall loading, retrieve touch, forget, clear, budget, a snapshot's restore).

`WriteProtocol` runs each change in three steps: durable (the caller's PostgreSQL transaction
commits), then one Lua script under the robot's row lock, then its record, with the script's
(gen, seq), in the PostgreSQL mirror; the steps themselves are `RobotSync`'s
(app/working_memory/sync.py). The protocol, why each lock is taken and what a failure after
the commit does are described once, in ARCHITECTURE.md ("The two-tier write protocol").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from app.db.session import DbSession
from app.visibility import shared_with_group
from app.working_memory.items import WMItem
from app.working_memory.loads import PendingLoads
from app.working_memory.model import (
    UNAVAILABLE,
    Holder,
    Placement,
    RedisBreaker,
    RedisUnavailable,
    RepairQueue,
    Scope,
    TierCounts,
    from_us,
    to_us,
)
from app.working_memory.readable_repository import ReadableRepository
from app.working_memory.repository import LockedRobot, Placed
from app.working_memory.robots import GROUP_PREFIX, Robot, RobotCache
from app.working_memory.schemas import WorkingMemoryOutcome
from app.working_memory.store import (
    Change,
    PlaceResult,
    RemoveResult,
    WorkingMemoryNotInitialized,
    WorkingMemoryStore,
)
from app.working_memory.sync import RobotSync

log = logging.getLogger(__name__)


class WriteProtocol(RobotSync):
    """The operations; RobotSync (sync.py) holds the lock-run-record step they share."""

    # --- step 1 -------------------------------------------------------------------------

    async def mark_holders(self, memory_id: int) -> list[Holder]:
        """In a replace's or forget's durable transaction, after it locked the memory's row
        (FOR UPDATE): every robot holding the memory owes its withdrawal. Pass the result to
        `withdraw` once the transaction committed."""
        rows = await self.members.mark_holders_stale(memory_id)
        return [Holder(r.id, r.name) for r in rows]

    async def mark_unreadable(self, held: Sequence[tuple[Holder, int, str]]) -> None:
        """In a durable transaction: these robots may no longer read these memories they
        hold. Pass them to `withdraw_each` once it committed."""
        await self.members.mark_stale([h.robot_id for h, _, _ in held], [m for _, m, _ in held])

    async def withdraw_each(self, held: Sequence[tuple[Holder, int, str]]) -> None:
        """`withdraw` of each (holder, memory id, key), after the commit."""
        for holder, memory_id, key in held:
            await self.withdraw([holder], memory_id, key)

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
        A memory replaced or forgotten since it was read is skipped (`superseded`).

        A recall's placement first tries `_refresh`: when both tiers hold every hit as it
        would be placed, only the last accesses move, without the lock."""
        holder = robot.working_memory  # a group member places in the group's
        await self.settle(holder)  # after the recall loads this process took before
        refused: dict[str, WorkingMemoryOutcome] = {}
        if holder.id != robot.id:  # what not every member may read stays out
            refused = {
                p.key: WorkingMemoryOutcome(admitted=False, reason="not_shared")
                for p in placements
                if not shared_with_group(p.audience.visibility, p.audience.group_id, holder.id)
            }
            placements = [p for p in placements if p.key not in refused]
        return {**refused, **await self._place(holder, placements, from_recall)}

    async def _place(
        self, robot: Robot, placements: Sequence[Placement], from_recall: bool
    ) -> dict[str, WorkingMemoryOutcome]:
        if not placements:
            return {}
        if self.breaker.open:
            return _all(placements, "unavailable")
        if from_recall:
            refreshed = await self._refresh(robot, placements)
            if refreshed is not None:
                return refreshed
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
            # A pool's grant may have been taken away since its memories were read.
            for key in await ReadableRepository(self.session).lost(self.scope, robot, live):
                out[key] = WorkingMemoryOutcome(admitted=False, reason="not_readable")
            live = [p for p in live if p.key not in out]
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

    async def _refresh(
        self, robot: Robot, placements: Sequence[Placement]
    ) -> dict[str, WorkingMemoryOutcome] | None:
        """A recall whose hits are all in place already (a question asked again): placing
        them would change nothing but their last access, so that is all this does, as a
        touch does: one script that moves the accesses in Redis if every hit is held as it
        would be placed, then one statement that moves them in the mirror for the hits it
        holds too. No robot lock, no (gen, seq), no change-stream entry, no memory row locked.
        None when a hit is not in place in both tiers: the caller places them all."""
        now_ms = to_us(self.clock()) // 1000
        items = [
            WMItem(p.key, p.content, p.tokens, p.importance, 0, _access_ms(p, now_ms), True,
                   p.memory_id)
            for p in placements
        ]  # fmt: skip
        try:
            missing = await self.store.refresh(self.namespace, robot.name, items)
        except WorkingMemoryNotInitialized:
            return None  # the placement rebuilds first
        except UNAVAILABLE as exc:
            # The script may have run: the mirror learns of a possible change by a rebuild.
            self.breaker.trip()
            log.warning("redis unavailable refreshing %s/%s: %s", self.namespace, robot.name, exc)
            await self._mark_stale(robot)
            await self._commit_or_queue(robot)
            return _all(placements, "unavailable")
        self.breaker.reset()
        if missing:
            return None
        try:
            held = await self.members.touch_held(
                robot.id, [p.memory_id for p in placements], from_us(now_ms * 1000)
            )
            await self.session.commit()
        except Exception:
            await self._failed(robot)
            return _all(placements, "unavailable")
        if len(held) < len(placements):
            # Redis holds what the mirror does not list (the robot is stale, or a change is
            # unrecorded): the placement's lock and (gen, seq) check settle it.
            return None
        return {p.key: WorkingMemoryOutcome(admitted=True) for p in placements}

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
                _access_ms(p, now_us // 1000),
                from_recall,
                p.memory_id,
            )
            for i, p in enumerate(live)
        ]
        result, _ = await self._run(
            robot, state, lambda budget: self.store.place(self.namespace, robot.name, items, budget)
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
        evicted = [i for i in result.evicted_ids if i not in present]
        await self.members.record_place(
            self.scope.namespace_id,
            robot.id,
            Change(result.gen, result.seq),
            placed=placed,
            departed=departed,
            evicted=evicted,
            at=at,
        )
        self.counts.evictions += len(evicted)

    async def apply_budget(self, robot: Robot) -> list[str]:
        """After a budget change committed: evict down to the new budget now."""
        robot = robot.working_memory
        if self.breaker.open:
            return await self._mark_stale_alone(robot)
        try:
            state = await self._lock(robot)
            result, _ = await self._run(
                robot,
                state,
                lambda budget: self.store.place(self.namespace, robot.name, [], budget),
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
        return lambda _budget: self.store.remove(self.namespace, robot, [(key, memory_id)])

    async def clear(self, robot: Robot) -> int:
        """Empty the robot's working memory. Durable: a client is told it is done. With Redis
        unreachable the mirror is emptied and the robot marked stale (rebuilt empty later)."""
        robot = robot.working_memory
        state = await self._lock(robot, relaxed=False)
        if self.breaker.open:
            await self._mark_stale(robot)
        else:
            try:
                result, _ = await self._run(
                    robot, state, lambda _budget: self.store.clear(self.namespace, robot.name)
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
                self.repairs.add(self.scope.namespace_id, self.namespace, robot.id, robot.name)
                raise
        count = await self.members.record_clear(robot.id, None)
        await self.session.commit()
        return count

    async def retire(self, robot: Robot) -> None:
        """After a robot's row was deleted (committed; it held nothing): its Redis keys go,
        the change stream's history with them. Best effort: keys left by a Redis failure
        are never read, as a robot registered again under the name starts with a rebuild
        (no recorded change), which replaces them."""
        try:
            await self.store.drop(self.namespace, robot.name)
        except UNAVAILABLE as exc:
            log.warning(
                "redis keys of removed robot %s/%s left: %s", self.namespace, robot.name, exc
            )

    async def touch(self, robot: Robot, memory_id: int, key: str) -> None:
        """An access by a retrieve. Not a change of the working set: no lock, no seq; both
        tiers only ever move a last access forward."""
        robot = robot.working_memory
        await self.settle(robot)
        now_ms = to_us(self.clock()) // 1000
        at = from_us(now_ms * 1000)  # Postgres gets the instant Redis keeps (ms)
        found: int | None = None
        reached = False
        if not self.breaker.open:
            try:
                try:
                    found = await self.store.touch(self.namespace, robot.name, key, now_ms)
                except WorkingMemoryNotInitialized:
                    # Rebuilt first. A robot removed meanwhile (resync finds no row: a write
                    # that registered it failed) has nothing to touch, nor one dropped again
                    # since: the retrieve still answers.
                    if await self.resync(robot):
                        with contextlib.suppress(WorkingMemoryNotInitialized):
                            found = await self.store.touch(self.namespace, robot.name, key, now_ms)
                self.breaker.reset()
                reached = True
            except (RedisUnavailable, *UNAVAILABLE) as exc:
                self.breaker.trip()
                log.warning("redis unavailable touching %s/%s: %s", self.namespace, robot.name, exc)
        if not reached:
            # Postgres still learns of the access; Redis, when back, is rebuilt from it.
            await self._mark_stale(robot)
            await self.members.touch(robot.id, memory_id, at)
        elif found == memory_id:
            await self.members.touch(robot.id, memory_id, at)

    # --- state keys (app/state/) --------------------------------------------------------

    async def write_state(
        self, holder: Robot, op: str, key: str, version: int, payload: str, keep_ms: int
    ) -> None:
        """After a state change committed: its Redis copy and its `state` event. Never
        fails: when Redis cannot take it, the holder is marked stale (or queued for repair),
        so no reader trusts its copy, which may be older, until a rebuild wipes it
        (scripts/load.lua)."""
        if not self.breaker.open:
            try:
                await self.store.write_state(
                    self.namespace, holder.name, op, key, version, payload, keep_ms
                )
                return
            except UNAVAILABLE as exc:
                self.breaker.trip()
                log.warning("redis unavailable writing state of %s/%s: %s", self.namespace,
                            holder.name, exc)  # fmt: skip
        await self._mark_stale_alone(holder)
        if holder.name.startswith(GROUP_PREFIX):
            # Each member's cached robot carries its group's flag: drop them all here (a
            # rare step, Redis having failed), so no member of this process reads the copy.
            self.robots.clear()

    async def read_state(self, holder: Robot, key: str) -> tuple[int, str] | None:
        """The Redis copy of a state key, or None: none held, Redis unreachable, or the
        holder stale (its copy may be older than PostgreSQL's row)."""
        if holder.stale or self.breaker.open:
            return None
        try:
            return await self.store.read_state(self.namespace, holder.name, key)
        except UNAVAILABLE as exc:
            self.breaker.trip()
            log.warning("redis unavailable reading state of %s/%s: %s", self.namespace,
                        holder.name, exc)  # fmt: skip
            return None

    async def fill_state(
        self, holder: Robot, key: str, version: int, payload: str, keep_ms: int
    ) -> None:
        """Copy a state key read from PostgreSQL to Redis (a newer copy there stays). Best
        effort: a copy not written is read from PostgreSQL again."""
        if holder.stale or self.breaker.open:
            return
        try:
            await self.store.write_state(
                self.namespace, holder.name, "fill", key, version, payload, keep_ms
            )
        except UNAVAILABLE:
            self.breaker.trip()


def _access_ms(p: Placement, now_ms: int) -> int:
    return now_ms if p.at is None else to_us(p.at) // 1000


def _all(placements: Sequence[Placement], reason: str) -> dict[str, WorkingMemoryOutcome]:
    return {p.key: WorkingMemoryOutcome(admitted=False, reason=reason) for p in placements}  # type: ignore[arg-type]


@dataclass(frozen=True)
class TwoTier:
    """What the write protocol uses for the app's lifetime (made once, in the lifespan);
    `protocol` adds one request's session and namespace."""

    store: WorkingMemoryStore
    breaker: RedisBreaker
    robots: RobotCache
    repairs: RepairQueue
    default_budget: int
    clock: Callable[[], datetime]
    counts: TierCounts = field(default_factory=TierCounts)
    # This process's recall loads not applied yet (app/working_memory/loads.py).
    pending: PendingLoads = field(default_factory=PendingLoads)

    def protocol(self, session: DbSession, scope: Scope, *, settle: bool = True) -> WriteProtocol:
        """settle=False: the protocol of the recall loader itself, which must not wait for
        the loads it applies."""
        return WriteProtocol(
            session,
            self.store,
            self.breaker,
            robots=self.robots,
            repairs=self.repairs,
            scope=scope,
            default_budget=self.default_budget,
            clock=self.clock,
            counts=self.counts,
            pending=self.pending if settle else None,
        )
