"""Robot groups: members share one working memory (HTM's robot groups).

A group's working memory is kept exactly like a robot's (the write protocol, its mirror, its
(gen, seq), repair), under a robot row of its own, `group:<name>`; a member's working-memory
reads and writes resolve to it (Robot.working_memory). Each process caches a robot with its
group (RobotCache): this process sees a membership or budget change at once, every other
when the change's message arrives on the invalidation channel (app/invalidation), and within
RobotCache's TTL (5 s) when it cannot.
"""

from __future__ import annotations

from typing import Any

from app.auth.caller import Caller
from app.db.session import DbSession
from app.errors import Conflict, NotFound
from app.groups.repository import GroupRepository
from app.groups.schemas import GroupRead, GroupUpdate
from app.working_memory.protocol import WriteProtocol
from app.working_memory.robots import Robot, RobotCache, group_name, group_row_name


class GroupService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        two_tier: WriteProtocol,
        robots: RobotCache,
        default_budget: int,
    ) -> None:
        self.session = session
        self.ns = caller.namespace_id
        self.two_tier = two_tier
        self.robots = robots
        self.default_budget = default_budget
        self.repo = GroupRepository(session)

    def _read(self, row: Any) -> GroupRead:
        return GroupRead(
            name=group_name(row.name),
            members=list(row.members),
            working_memory_budget=row.working_memory_budget or self.default_budget,
            working_memory_budget_is_default=row.working_memory_budget is None,
        )

    async def put(self, name: str, body: GroupUpdate) -> GroupRead:
        """Create the group or set its members and budget. A robot of another group is a
        409 (it leaves that group first) and nothing changes."""
        row_name = group_row_name(name)
        group = await self.repo.upsert(self.ns, row_name, body.working_memory_budget)
        taken = await self.repo.others(self.ns, group.id, body.members)
        if taken:
            raise _in_another_group(taken)
        changed = await self.repo.set_members(self.ns, group.id, body.members)
        row = await self._row(name)
        if sorted(row.members) != sorted(body.members):  # one joined another group meanwhile
            raise _in_another_group(await self.repo.others(self.ns, group.id, body.members))
        await self.two_tier.commit_durable()
        # Every member cached in this process carries the group's budget: all of them are
        # read again, not only those who joined or left (in every process: RobotCache.forget).
        for robot in {*changed, *row.members}:
            self.robots.forget(self.ns, robot)
        # A smaller budget takes effect at once, as a robot's does.
        budget = row.working_memory_budget or self.default_budget
        await self.two_tier.apply_budget(Robot(group.id, row_name, budget))
        return self._read(row)

    async def change(
        self, name: str, join: list[str] | None = None, leave: list[str] | None = None
    ) -> GroupRead:
        """Members join and leave an existing group (its budget kept): the group's row locked,
        so concurrent changes each see the other's; then as `put`. What MCP's join, leave
        and failover do."""
        if await self.repo.lock(self.ns, group_row_name(name)) is None:
            raise NotFound(f"group {name!r} does not exist")
        row = await self._row(name)
        members = [m for m in row.members if m not in (leave or [])]
        members += [r for r in join or [] if r not in members]
        body = GroupUpdate(members=members, working_memory_budget=row.working_memory_budget)
        return await self.put(name, body)

    async def get(self, name: str) -> GroupRead:
        return self._read(await self._row(name))

    async def list(self) -> list[GroupRead]:
        return [self._read(r) for r in await self.repo.list(self.ns)]

    async def delete(self, name: str) -> GroupRead:
        """The shared working memory is cleared, then the group goes; its members have
        their own working memories again."""
        row = await self._row(name)
        budget = row.working_memory_budget or self.default_budget
        await self.two_tier.clear(Robot(row.id, row.name, budget))  # commits
        await self.repo.delete(row.id)
        await self.two_tier.commit_durable()
        for robot in row.members:
            self.robots.forget(self.ns, robot)
        return self._read(row)

    async def _row(self, name: str) -> Any:
        row = await self.repo.get(self.ns, group_row_name(name))
        if row is None:
            raise NotFound(f"group {name!r} does not exist")
        return row


def _in_another_group(rows: list[Any]) -> Conflict:
    listed = ", ".join(f"{r.name} (group {group_name(r.group_name)})" for r in rows)
    return Conflict(
        f"robots already in another group: {listed}; take them out of it first",
        robots=[r.name for r in rows],
    )
