from __future__ import annotations

from typing import Any

from app import names
from app.db.session import DbSession
from app.errors import Conflict, NotFound
from app.robots.repository import RobotRepository
from app.robots.schemas import RobotRead, RobotUpdate
from app.working_memory.protocol import WriteProtocol
from app.working_memory.robots import Robot, RobotCache, group_name, robot_from_row

__all__ = ["Robot", "RobotService"]


class RobotService:
    def __init__(
        self,
        *,
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

    def _remember(self, row: Any, since: int | None = None) -> Robot:
        """The row as a Robot, cached unless the cache moved since `since` (the generation
        the lookup that read it began in: a change may have committed after the read)."""
        robot = self._robot(row)
        self.cache.put(self.namespace_id, robot, since=since)
        return robot

    async def ensure(self, name: str) -> Robot:
        """The robot, registered on first use."""
        return (await self.register(name))[0]

    async def register(self, name: str) -> tuple[Robot, int | None]:
        """The robot, registered on first use, and the version of its row when this
        transaction registered it (else None): if the write it was registered for fails
        after that commit, `discard` it with that version."""
        robot = self.cache.get(self.namespace_id, name)
        if robot is not None:
            return robot, None
        names.check("robot", name)
        since = self.cache.generation
        row, created = await self.repo.ensure(self.namespace_id, name)
        # A robot created by this transaction is not cached: if the request fails (a 409,
        # say) the row is rolled back, and a cached id would point at nothing.
        if created:
            return self._robot(row), row.row_version
        return self._remember(row, since), None

    async def register_first(self, name: str) -> tuple[Robot, int | None]:
        """`register`, committed at once in a transaction of its own: for a write that
        inserts memories, whose transaction must not hold robot's table lock (a
        registration's insert, a last-seen update). On TimescaleDB a new chunk of `memory`
        locks the tables its foreign keys reference (robot, namespace) after the hypertable,
        so such a transaction inserting into that chunk deadlocked with the one creating it
        (503; tests/db/test_timescaledb.py)."""
        registered = await self.register(name)
        await self.two_tier.commit_durable()
        return registered

    def forget(self, name: str) -> None:
        """Read the robot again next time (it was removed meanwhile)."""
        self.cache.forget(self.namespace_id, name)

    async def require(self, name: str) -> Robot:
        """The robot, or 404: reads never register robots."""
        robot = self.cache.get(self.namespace_id, name)
        if robot is not None:
            return robot
        since = self.cache.generation
        row = await self.repo.get(self.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._remember(row, since)

    async def list(self) -> list[RobotRead]:
        return [self._read(r) for r in await self.repo.list(self.namespace_id)]

    async def get(self, name: str) -> RobotRead:
        row = await self.repo.get(self.namespace_id, name)
        if row is None:
            raise NotFound(f"robot {name!r} does not exist")
        return self._read(row)

    async def put(self, name: str, body: RobotUpdate) -> RobotRead:
        names.check("robot", name)
        row = await self.repo.upsert_budget(
            self.namespace_id,
            name,
            body.working_memory_budget,
            session_ttl_s=body.session_ttl_s,
            summarize=body.summarize_evictions,
        )
        await self.two_tier.commit_durable()
        # Every process reads the robot again (its budget changed); this one from this row.
        self.cache.forget(self.namespace_id, name)
        row = await self.repo.get(self.namespace_id, name)  # with its group's columns
        # Cached only once committed: a robot this request created may not exist otherwise.
        robot = self._remember(row)
        # A smaller budget takes effect at once: the working memory is trimmed by policy.
        await self.two_tier.apply_budget(robot)
        return self._read(row)

    async def remove(self, name: str) -> RobotRead:
        """Remove a robot that holds nothing: no memory it authored (forgotten ones included:
        they are restorable), no session, nothing in its working memory. Else 409 saying
        what it still holds, and nothing changes. A concurrent write referring to the robot
        either commits first (and this refuses) or finds it gone (409, retry)."""
        names.check("robot", name)
        row = await self.repo.get(self.namespace_id, name)
        held = await self.repo.lock_for_removal(self.namespace_id, name)
        if row is None or held is None:
            raise NotFound(f"robot {name!r} does not exist")
        holds = _holds(held)
        if any(holds.values()):
            listed = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in holds.items() if n)
            raise Conflict(
                f"robot {name!r} still holds {listed}: forget its memories with a confirmed "
                "hard delete, end its sessions and clear its working memory first",
                holds=holds,
            )
        await self.repo.delete(held.id)
        await self.two_tier.commit_durable()
        self.cache.forget(self.namespace_id, name)
        await self.two_tier.retire(self._robot(row))
        return self._read(row)

    async def discard(self, robot: Robot, version: int) -> None:
        """Undo the registration of a robot whose first write was refused after the
        registration committed: removed only if provably unused, i.e. its row is still as
        that registration wrote it (`version`: no PUT, no working-memory change since), it
        holds nothing, and no transaction holds or waits for a lock on it (an insert that
        refers to it, in flight). It never waits: a robot it cannot take at once is kept (a
        robot that holds nothing is harmless), so it never holds up a concurrent write. A
        write that read the robot before and writes after finds it gone and registers it
        again (`RemovedMeanwhile`)."""
        held = await self.repo.lock_unused(self.namespace_id, robot.name)
        if (
            held is not None
            and (held.id, held.row_version) == (robot.id, version)
            and not any(_holds(held).values())
        ):
            await self.repo.delete(held.id)
            self.cache.forget(self.namespace_id, robot.name)  # read by a request meanwhile
        await self.two_tier.commit_durable()


def _holds(held: Any) -> dict[str, int]:
    return {
        "memories": held.memories,
        "forgotten_memories": held.forgotten,
        "sessions": held.sessions,
        "working_memory_items": held.working_memory,
    }
