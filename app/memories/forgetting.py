"""Forget, archive and restore: the soft and hard deletes, which MemoryService (service.py)
hands to a `Forgetting` of its own."""

from __future__ import annotations

from typing import Any

from app.auth.caller import Caller
from app.errors import BadRequest, NotFound
from app.events.repository import EventRepository
from app.memories.access import AccessTracker
from app.memories.audiences import Audiences
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryRead, to_read
from app.robots.service import RobotService
from app.visibility import Reader
from app.working_memory.protocol import WriteProtocol

ARCHIVIST = "htm-retention"  # the robot a retention policy's archive is recorded as


class Forgetting:
    """The deletes, in the caller's namespace, on the session of the repositories given."""

    def __init__(
        self,
        *,
        caller: Caller,
        robots: RobotService,
        repo: MemoryRepository,
        events: EventRepository,
        two_tier: WriteProtocol,
        audiences: Audiences,
        access: AccessTracker,
        nearby: int,
        nearby_similarity: float,
    ) -> None:
        # A forget's neighbours lose a little learned importance (app/memories/learning.py):
        # the `nearby` nearest by vector at a similarity of at least `nearby_similarity`.
        self.access = access
        self.nearby = nearby
        self.nearby_similarity = nearby_similarity
        self.caller = caller
        self.robots = robots
        self.repo = repo
        self.events = events
        self.two_tier = two_tier
        self.audiences = audiences

    async def _locked(self, key: str, *, reader: str, include_deleted: bool) -> Any:
        """The memory as `reader` may see it, locked (404 otherwise)."""
        ns = self.caller.namespace_id
        row = await self.repo.get(ns, key, for_update=True, reader=Reader(ns, reader))
        if row is None or (row.deleted_at is not None and not include_deleted):
            raise NotFound(f"memory {key!r} does not exist")
        return row

    async def forget(
        self, robot_name: str, key: str, hard: bool, confirm: str | None, *, nearby: bool = True
    ) -> MemoryRead:
        """Soft delete by default (restorable); hard delete only when `confirm` repeats the key.
        Every robot holding it lets it go, after the durable commit. The memories nearest to
        it that the robot may read take a `forgotten_nearby` step of their learned importance
        (app/memories/learning.py; a restore does not take it back), unless not `nearby`."""
        robot = await self.robots.ensure(robot_name)
        row = await self._locked(key, reader=robot_name, include_deleted=hard)
        await self.audiences.may_change(robot, row)
        if hard and confirm != key:
            raise BadRequest(
                "a hard delete is permanent: repeat the memory's key in `confirm` to proceed",
                field="confirm",
            )
        near: list[int] = []
        if (
            nearby and row.deleted_at is None and self.nearby > 0
        ):  # before a hard delete takes its vector
            near = await self.repo.nearest_live(
                self.caller.namespace_id, row.id, row.created_at,
                Reader(self.caller.namespace_id, robot_name), self.nearby,
                self.nearby_similarity,
            )  # fmt: skip
        holders = await self.two_tier.mark_holders(row.id)
        if hard:
            await self.repo.hard_delete(self.caller.namespace_id, row.id, row.created_at)
            read = to_read(row)
        else:
            deleted = await self.repo.set_deleted(
                self.caller.namespace_id, row.id, row.created_at, True
            )
            read = to_read(row).model_copy(
                update={"deleted_at": deleted.deleted_at, "updated_at": deleted.updated_at}
            )
        await self.events.record(
            self.caller.namespace_id,
            "forget",
            robot.id,
            memory_ids=[row.id],
            detail={"hard": hard, "key": key},
        )
        await self.two_tier.commit_durable()
        for id_ in near:  # once the forget is durable; written by the access-count flush
            self.access.record_feedback(id_, "forgotten_nearby")
        await self.two_tier.withdraw(holders, row.id, key)
        return read

    async def archive(self, key: str, version: int, rule: str) -> bool:
        """A retention policy's forget (app/retention): a soft delete naming `rule`, of the
        memory as the policy judged it (`version`; changed since: skipped), by the
        `htm-retention` robot; every holder lets it go. Whether it was archived."""
        robot = await self.robots.ensure(ARCHIVIST)
        row = await self.repo.get(self.caller.namespace_id, key, for_update=True)
        if row is None or row.deleted_at is not None or row.version != version:
            return False
        holders = await self.two_tier.mark_holders(row.id)
        await self.repo.set_deleted(
            self.caller.namespace_id, row.id, row.created_at, True, archived=rule
        )
        detail = {"hard": False, "key": key, "archived": rule}
        await self.events.record(
            self.caller.namespace_id, "forget", robot.id, memory_ids=[row.id], detail=detail
        )
        await self.two_tier.commit_durable()
        await self.two_tier.withdraw(holders, row.id, key)
        return True

    async def restore(self, robot_name: str, key: str) -> MemoryRead:
        robot = await self.robots.ensure(robot_name)
        row = await self._locked(key, reader=robot_name, include_deleted=True)
        await self.audiences.may_change(robot, row)
        if row.deleted_at is None:
            return to_read(row)
        restored = await self.repo.set_deleted(
            self.caller.namespace_id, row.id, row.created_at, False
        )
        await self.events.record(self.caller.namespace_id, "restore", robot.id, memory_ids=[row.id])
        await self.two_tier.commit_durable()
        return to_read(row).model_copy(
            update={"deleted_at": None, "updated_at": restored.updated_at, "archived": None}
        )
