"""Snapshots of a robot's working memory: what its mirror holds at an instant (each memory,
the version held, its order and last access), and the memories it could read then; a restore
rebuilds working memory from one through the write protocol (a load, as a rebuild is)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.db.session import DbSession
from app.errors import NotFound
from app.robots.service import Robot, RobotService
from app.snapshots.repository import SnapshotRepository
from app.snapshots.schemas import (
    SnapshotCreate,
    SnapshotDetail,
    SnapshotItem,
    SnapshotRead,
    SnapshotRestored,
)
from app.visibility import Reader
from app.working_memory.items import eviction_order
from app.working_memory.model import from_us, member_items, to_us
from app.working_memory.protocol import WriteProtocol
from app.working_memory.sync import Restoring


class SnapshotService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        clock: Clock,
    ) -> None:
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.clock = clock
        self.repo = SnapshotRepository(session)

    async def create(self, robot_name: str, body: SnapshotCreate) -> SnapshotRead:
        """Taken under the robot's lock (held until this transaction commits), so it is the
        working memory between two changes, as the mirror records it."""
        robot = await self.robots.require(robot_name)
        rows = await self.two_tier.held(robot)
        versions = {r.id: r.version for r in rows}
        items = [
            {
                "memory_id": i.memory_id,
                "key": i.key,
                "version": versions[i.memory_id],
                "tokens": i.tokens,
                "importance": i.importance,
                "added_at": from_us(i.added_at_us),
                "last_access_at": from_us(i.last_access_ms * 1000),
                "from_recall": i.from_recall,
            }
            for i in eviction_order(member_items(rows))
        ]
        at = self.clock()
        ns = self.caller.namespace_id
        snapshot_id = await self.repo.create(ns, robot.id, body.name, at=at, items=items)
        await self.repo.record_readable(snapshot_id, ns, at, Reader(ns, robot.name))
        return SnapshotRead(
            id=snapshot_id,
            robot=robot.name,
            name=body.name,
            created_at=at,
            item_count=len(items),
            tokens=sum(i["tokens"] for i in items),
        )

    def _reader(self, robot: Robot) -> Reader:
        """What the robot is shown of its snapshots: the memories it may read now (one it
        held then and may no longer read is left out, from the counts too)."""
        return Reader(self.caller.namespace_id, robot.name)

    async def list(self, robot_name: str) -> list[SnapshotRead]:
        robot = await self.robots.require(robot_name)
        return [
            SnapshotRead.model_validate(r, from_attributes=True)
            for r in await self.repo.of_robot(robot.id, self._reader(robot))
        ]

    async def _own(self, robot: Robot, snapshot_id: int) -> Any:
        row = await self.repo.get(robot.id, snapshot_id, self._reader(robot))
        if row is None:
            raise NotFound(f"robot {robot.name!r} has no snapshot {snapshot_id}")
        return row

    async def get(self, robot_name: str, snapshot_id: int) -> SnapshotDetail:
        robot = await self.robots.require(robot_name)
        row = await self._own(robot, snapshot_id)
        items = [
            SnapshotItem.model_validate(i, from_attributes=True)
            for i in await self.repo.items(snapshot_id, self._reader(robot))
        ]
        return SnapshotDetail.model_validate({**row._asdict(), "items": items})

    async def delete(self, robot_name: str, snapshot_id: int) -> SnapshotRead:
        robot = await self.robots.require(robot_name)
        row = await self._own(robot, snapshot_id)
        await self.repo.delete(robot.id, snapshot_id)
        return SnapshotRead.model_validate(row, from_attributes=True)

    async def restore(self, robot_name: str, snapshot_id: int) -> SnapshotRestored:
        """Working memory becomes the snapshot's, through the write protocol: each memory
        still current with its current content (a memory changed since is restored as it is
        now), its recorded order, last access and origin; the budget applies (the eviction
        policy trims). Memories forgotten or superseded since are skipped and named with the
        reason; those the robot may no longer read are skipped unnamed and counted."""
        robot = await self.robots.require(robot_name)
        await self._own(robot, snapshot_id)
        items = await self.repo.items(snapshot_id)
        wanted = [
            Restoring(
                i.memory_id, to_us(i.added_at), to_us(i.last_access_at) // 1000, i.from_recall
            )
            for i in items
        ]
        done = await self.two_tier.restore(robot, wanted)
        keys = {i.memory_id: i.key for i in items}
        hidden = (
            await self.repo.hidden(done.skipped, self._reader(robot)) if done.skipped else set()
        )
        skipped = [i for i in done.skipped if i not in hidden]
        still = await self.repo.ended(skipped) if skipped else set()
        return SnapshotRestored.model_validate(
            {
                "id": snapshot_id,
                "robot": robot.name,
                "restored": [keys[i] for i in done.placed],
                "skipped": [
                    {"key": keys[i], "reason": "superseded" if i in still else "forgotten"}
                    for i in skipped
                ],
                "withheld": len(hidden),
                "evicted": [keys[i] for i in done.evicted],
                "tokens": done.tokens,
            }
        )

    # --- export and import -------------------------------------------------------------------

    async def adopt(
        self,
        robot_name: str,
        name: str | None,
        at: datetime,
        *,
        items: Sequence[SnapshotItem],
        readable: Sequence[str],
    ) -> bool:
        """An exported snapshot, recreated with the memories of this namespace of the same
        keys (an item whose key is not here is left out). Whether it was added: one of the
        robot's with the same name and time is the same snapshot, imported before."""
        try:  # read first: an import run again writes nothing, not even a robot's last seen
            robot = await self.robots.require(robot_name)
            if await self.repo.exists(robot.id, name, at):
                return False
        except NotFound:
            robot = await self.robots.ensure(robot_name)
        ns = self.caller.namespace_id
        ids = await self.repo.ids_of(ns, [*(i.key for i in items), *readable])
        kept = [{"memory_id": ids[i.key], **i.model_dump()} for i in items if i.key in ids]
        snapshot_id = await self.repo.create(ns, robot.id, name, at=at, items=kept)
        await self.repo.add_readable(snapshot_id, [ids[k] for k in readable if k in ids])
        return True
