"""The lines of an export that are not memories, applied by `htm import` through the services
of the routes that set them (PUT /v1/robots, /v1/groups, /v1/pools, /v1/retention,
/v1/maintenance; a link's POST; a snapshot), each in a unit of work, each skipped when the
namespace has it already: so a second import writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.auth.caller import Caller
from app.components import Components
from app.errors import NotFound
from app.groups.schemas import GroupUpdate
from app.transfer.format import SnapshotRecord
from app.transfer.plan import Plan, PoolState
from app.transfer.reading import lines
from app.unit import unit_of_work


@dataclass
class Written:
    robots: int = 0
    groups: int = 0
    pools: set[str] = field(default_factory=set)  # staged or set
    settings: int = 0  # retention policies and maintenance schedule
    links: int = 0
    snapshots: int = 0

    def summary(self) -> str:
        """', 2 robots set, 1 links added'...: what was written, nothing when nothing was."""
        done = [
            (self.robots, "robots set"),
            (self.groups, "groups set"),
            (len(self.pools), "pools set"),
            (self.settings, "namespace settings set"),
            (self.links, "links added"),
            (self.snapshots, "snapshots added"),
        ]
        return "".join(f", {n} {what}" for n, what in done if n)


async def robots(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    """Each robot's settings."""
    for name, settings in plan.robots:
        wanted = (settings.working_memory_budget, settings.session_ttl_s)
        async with unit_of_work(c, caller) as u:
            try:
                r = await u.robots.get(name)
                budget = None if r.working_memory_budget_is_default else r.working_memory_budget
                if (budget, r.session_ttl_s, r.summarize_evictions) == (
                    *wanted,
                    settings.summarize_evictions,
                ):
                    continue
            except NotFound:
                pass
            await u.robots.put(name, settings)
        done.robots += 1


async def groups(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    """Each group's members and budget; a robot leaving one group of the file for another
    leaves first (a robot is in one group at a time)."""
    left: set[str] = set()  # groups robots left
    for name, group in plan.groups:
        async with unit_of_work(c, caller) as u:
            current = {g.name: g for g in await u.groups.list()}.get(name)
            if current is not None and set(current.members) - set(group.members):
                stay = [m for m in current.members if m in group.members]
                await u.groups.put(name, GroupUpdate(members=stay))
                left.add(name)
    done.groups += len(left)
    for name, group in plan.groups:
        async with unit_of_work(c, caller) as u:
            current = {g.name: g for g in await u.groups.list()}.get(name)
            if current is not None:
                budget = None
                if not current.working_memory_budget_is_default:
                    budget = current.working_memory_budget
                if (sorted(current.members), budget) == (
                    sorted(group.members),
                    group.working_memory_budget,
                ):
                    continue
            await u.groups.put(name, group)
        done.groups += name not in left


async def stage_pools(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    """Each pool memories are written into, open to the robots that write them."""
    for name, authors in plan.staged.items():
        staged = PoolState(plan.pools[name].staged(authors, c.clock()), archived=False)
        async with unit_of_work(c, caller) as u:
            if not staged.matches({p.name: p for p in await u.pools.list_pools()}.get(name)):
                await u.pools.put(name, staged.body)
                done.pools.add(name)


async def finish_pools(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    """Each pool as the file has it (one of the namespace's only staged: as it was),
    archived if so: the PUT, then the DELETE that archives."""
    for name, state in plan.pools.items():
        async with unit_of_work(c, caller) as u:
            current = {p.name: p for p in await u.pools.list_pools()}.get(name)
            if state.matches(current):
                continue
            archived = current is not None and current.archived_at is not None
            if not PoolState(state.body, archived).matches(current) or (
                archived and not state.archived
            ):
                current = await u.pools.put(name, state.body)  # revives an archived one
            if state.archived and current is not None and current.archived_at is None:
                await u.pools.delete(name)
        done.pools.add(name)


async def namespace_settings(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    """The retention policies and the maintenance schedule, when the file has them."""
    if plan.retention is not None:
        async with unit_of_work(c, caller) as u:
            if (await u.retention.policies()).policies != plan.retention.policies:
                await u.retention.set_policies(plan.retention)
                done.settings += 1
    if plan.maintenance is not None:
        async with unit_of_work(c, caller) as u:
            if await u.maintenance.schedule() != plan.maintenance:
                await u.maintenance.set_schedule(plan.maintenance)
                done.settings += 1


async def links(c: Components, caller: Caller, plan: Plan, done: Written) -> None:
    for source, body in plan.links:
        async with unit_of_work(c, caller) as u:
            done.links += await u.links.adopt(source, body)


async def snapshots(c: Components, caller: Caller, path: Path, done: Written) -> None:
    """Each snapshot with the memories of its keys (one imported before is skipped)."""
    for _, s in lines(path):
        if isinstance(s, SnapshotRecord):
            async with unit_of_work(c, caller) as u:
                done.snapshots += await u.snapshots.adopt(
                    s.robot, s.name, s.created_at, items=s.items, readable=s.readable
                )
