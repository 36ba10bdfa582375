"""Who a memory is written for (app/visibility.py), as an add or a PUT asks, and who may
change a memory: its author alone a private one (a grant reads, never writes), a pool's
writers a pool's, any robot that may read it otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.errors import Forbidden, Unprocessable
from app.memories.schemas import MemoryFields
from app.pools.service import PoolService
from app.robots.service import Robot
from app.visibility import NAMESPACE, Audience


class Audiences:
    def __init__(self, pools: PoolService) -> None:
        self.pools = pools

    async def for_adds(self, robot: Robot, bodies: Sequence[MemoryFields]) -> list[Audience]:
        return [await self.asked(robot, b) for b in bodies]

    async def asked(self, robot: Robot, body: MemoryFields) -> Audience:
        """The audience a body names (namespace when it names none)."""
        visibility = body.visibility or ("pool" if body.pool else "namespace")
        if visibility == "private":
            readers = dict.fromkeys(r for r in body.readers or () if r != robot.name)
            return Audience("private", tuple(readers))
        if visibility == "group":
            group = robot.working_memory
            if group.id == robot.id:
                raise Unprocessable(
                    f"robot {robot.name!r} is in no group: visibility group needs one",
                    errors=[{"field": "visibility", "message": "the robot is in no group"}],
                )
            return Audience("group", group_id=group.id)
        if visibility == "pool":
            assert body.pool is not None  # MemoryFields' validator
            pool_id, name = await self.pools.writable(robot.name, body.pool)
            return Audience("pool", pool_id=pool_id, pool=name)
        return NAMESPACE

    async def for_change(self, robot: Robot, row: Any, body: MemoryFields) -> Audience:
        """A PUT's (or PATCH's): the memory's own unless the body names one; 403 when the
        robot may not change the memory."""
        if row.visibility == "private" and row.author_robot_id != robot.id:
            raise Forbidden(
                f"memory {row.key!r} is private to its author; a grant only reads it",
                key=row.key,
            )
        if row.visibility == "pool":
            await self.pools.writable(robot.name, row.pool)
        if body.visibility is None and body.pool is None:
            return Audience.of(row)
        return await self.asked(robot, body)

    async def may_change(self, robot: Robot, row: Any) -> None:
        """A forget's or a restore's check (403)."""
        await self.for_change(robot, row, _KEEP)


_KEEP = MemoryFields.model_construct(visibility=None, pool=None)
