"""`htm import`'s check, before anything is written: every line as the API would check it,
and every name a line refers to found, in the file or in the namespace it goes to. A memory
names its author (a robot line, from format version 3), its pool, its group and what
superseded it; a link names its two memories; a snapshot its robot and its memories. The
first problem is a `BadFile`: `FILE:LINE: what, and the name not found`.

The check also reads (never writes) what the import must do beyond its lines: the pools its
memories are written into (open to their authors meanwhile), the memories that supersede
others (added one at a time once those are in) and the group memories whose author ends in
another group (written while it is in theirs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.auth.caller import Caller
from app.components import Components
from app.config import Settings
from app.errors import DomainError
from app.groups.schemas import GroupUpdate
from app.maintenance.schemas import MaintenanceSchedule
from app.memories.limits import check_fields
from app.memories.schemas import MemoryCreate
from app.pools.schemas import PoolPut, PoolRead
from app.relationships.schemas import LinkCreate
from app.retention.schemas import RetentionPolicies
from app.robots.schemas import RobotUpdate
from app.transfer.format import (
    SETTINGS_VERSION,
    GroupRecord,
    Header,
    LinkRecord,
    MaintenanceRecord,
    PoolRecord,
    Record,
    RetentionRecord,
    RobotRecord,
    SnapshotRecord,
)
from app.transfer.reading import BadFile, lines, memories, read_header, why
from app.transfer.repository import TransferRepository
from app.transfer.sync import Wanted, as_now, fields, same
from app.unit import unit_of_work

CHUNK = 500  # keys read at a time from the namespace


@dataclass
class PoolState:
    """A pool as an import leaves it: its PUT and whether it is archived."""

    body: PoolPut
    archived: bool

    def matches(self, pool: PoolRead | None) -> bool:
        b = self.body
        return pool is not None and (
            pool.type, pool.readers, pool.writers, pool.public_read, pool.expires_at,
            pool.archived_at is not None,
        ) == (b.type, b.readers, b.writers, b.public_read, b.expires_at, self.archived)  # fmt: skip

    def staged(self, authors: set[str], now: datetime) -> PoolPut:
        """Open while memories are written into it, its authors among its writers (an
        expired task pool a shared one meanwhile)."""
        b = self.body
        writers = b.writers + sorted(authors - set(b.writers))
        if b.expires_at is not None and b.expires_at <= now:
            return b.model_copy(update={"type": "shared", "expires_at": None, "writers": writers})
        return b.model_copy(update={"writers": writers})


@dataclass
class Plan:
    header: Header
    namespace: str
    memories: int = 0
    robots: list[tuple[str, RobotUpdate]] = field(default_factory=list)
    groups: list[tuple[str, GroupUpdate]] = field(default_factory=list)
    # The file's pools, and the namespace's that memories are written into, as they end.
    pools: dict[str, PoolState] = field(default_factory=dict)
    # The pools memories are written into, with the robots that write them.
    staged: dict[str, set[str]] = field(default_factory=dict)
    retention: RetentionPolicies | None = None
    maintenance: MaintenanceSchedule | None = None
    links: list[tuple[str, LinkCreate]] = field(default_factory=list)
    supersedes: dict[str, list[str]] = field(default_factory=dict)  # a key: those it supersedes
    deferred: set[str] = field(default_factory=set)  # keys written one at a time, after the rest

    @property
    def superseded(self) -> set[str]:
        return {k for ks in self.supersedes.values() for k in ks}


@dataclass
class _Target:
    """What the namespace holds now (nothing when it does not exist yet)."""

    robots: dict[str, str | None] = field(default_factory=dict)  # name: its group
    groups: dict[str, list[str]] = field(default_factory=dict)  # name: members
    pools: dict[str, PoolRead] = field(default_factory=dict)


def wanted(r: Record, *, keep_vector: bool = False, superseded_later: bool = False) -> Wanted:
    """A memory's line as the state its key is brought to (`superseded_later`: current until
    what supersedes it is added). A group memory whose group was deleted is read by its
    author alone: it is written as a private one."""
    orphan = r.visibility == "group" and "group" in r.model_fields_set and r.group is None
    return Wanted(
        key=r.key,
        author=r.author,
        content=r.content,
        type=r.type,
        importance=r.importance,
        confidence=r.confidence,
        source=r.source,
        tags=r.tags,
        metadata=r.metadata,
        created_at=r.created_at,
        deleted=r.deleted_at is not None,
        embedding=r.embedding if keep_vector else None,
        embedding_model=r.embedding_model if keep_vector else None,
        valid_from=r.valid_from,
        valid_to=r.valid_to,
        visibility="private" if orphan else r.visibility,
        readers=r.readers,
        pool=r.pool,
        archived=r.archived if r.deleted_at is not None else None,
        superseded_later=superseded_later,
        access_count=r.access_count,
        feedback=None
        if r.feedback is None
        else (
            r.feedback.scale,
            r.feedback.shift,
            r.feedback.used,
            r.feedback.unused,
            r.feedback.pinned,
            r.feedback.forgotten_nearby,
        ),
        last_accessed_at=r.last_accessed_at,
    )


class _Problems:
    """Problems found, by line: the first is the one reported."""

    def __init__(self, path: Path, namespace: str) -> None:
        self.path = path
        self.namespace = namespace
        self.found: list[tuple[int, str]] = []

    def add(self, line: int, why: str) -> None:
        self.found.append((line, why))

    def missing(self, line: int, reference: str, name: str) -> None:
        """`reference`: what names it, e.g. "memory 'k' is in pool"."""
        self.add(
            line,
            f"{reference} {name!r}, which is neither in the file nor in namespace "
            f"{self.namespace!r}",
        )

    def raise_first(self) -> None:
        if self.found:
            line, why = min(self.found)
            raise BadFile(self.path, line, why)


@dataclass
class _Names:
    """What the file's lines name: each name with the first line naming it and how (e.g.
    "memory 'k' is in pool"), checked once the whole file is read."""

    path: Path
    seen: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, name): its line
    member_of: dict[str, str] = field(default_factory=dict)  # robot: the group line it is in
    authors: dict[str, tuple[int, str]] = field(default_factory=dict)  # robots
    pools: dict[str, tuple[int, str]] = field(default_factory=dict)
    groups: dict[str, tuple[int, str]] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)  # the file's memories
    named: dict[str, tuple[int, str]] = field(default_factory=dict)  # memory keys
    superseded_by: dict[str, tuple[int, str]] = field(default_factory=dict)  # key: (line, by)

    def read(self, n: int, line: Any, *, plan: Plan, settings: Settings) -> None:
        """Line `n` into the plan, and the names it refers to; a line the API would refuse,
        or a second line of a setting, is a BadFile."""
        kind = getattr(line, "kind", "memory")
        name = getattr(line, "name", kind)
        if kind not in ("memory", "link", "snapshot"):
            if (kind, name) in self.seen:
                raise BadFile(
                    self.path,
                    n,
                    f"{kind} {name!r} has a line already (line {self.seen[kind, name]})",
                )
            self.seen[kind, name] = n
        try:
            if isinstance(line, Record):
                self._memory(n, line, plan=plan, settings=settings)
            elif isinstance(line, RobotRecord):
                plan.robots.append((line.name, line.body()))
            elif isinstance(line, GroupRecord):
                self._group(n, line, plan)
            elif isinstance(line, PoolRecord):
                plan.pools[line.name] = PoolState(line.body(), line.archived_at is not None)
            elif isinstance(line, RetentionRecord):
                plan.retention = line.body()
            elif isinstance(line, MaintenanceRecord):
                plan.maintenance = line.body()
            elif isinstance(line, LinkRecord):
                self._link(n, line, plan)
            elif isinstance(line, SnapshotRecord):
                what = f"snapshot {line.name or line.created_at.isoformat()!r}"
                self.authors.setdefault(line.robot, (n, f"{what} is of robot"))
                for key in [*(i.key for i in line.items), *line.readable]:
                    self.named.setdefault(key, (n, f"{what} names memory"))
        except ValidationError as exc:
            raise BadFile(self.path, n, why(exc)) from None
        except DomainError as exc:
            raise BadFile(self.path, n, exc.detail) from None

    def _memory(self, n: int, line: Record, *, plan: Plan, settings: Settings) -> None:
        w = wanted(line)
        check_fields(settings, MemoryCreate(key=w.key, **fields(w, vector=False)))
        plan.memories += 1
        self.keys.add(line.key)
        what = f"memory {line.key!r}"
        self.authors.setdefault(line.author, (n, f"{what} is by robot"))
        if line.pool is not None:
            self.pools.setdefault(line.pool, (n, f"{what} is in pool"))
        if w.visibility == "group" and line.group is not None:
            self.groups.setdefault(line.group, (n, f"{what} is in group"))
        if line.superseded_by is not None:
            self.superseded_by[line.key] = (n, line.superseded_by)
            self.named.setdefault(line.superseded_by, (n, f"{what} is superseded by memory"))
        else:
            self.superseded_by.pop(line.key, None)  # the key's last line stands

    def _group(self, n: int, line: GroupRecord, plan: Plan) -> None:
        members = line.body()
        for m in members.members:
            if m in self.member_of:
                raise BadFile(self.path, n, f"robot {m!r} is in group {self.member_of[m]!r} too")
            self.member_of[m] = line.name
        plan.groups.append((line.name, members))

    def _link(self, n: int, line: LinkRecord, plan: Plan) -> None:
        body = line.body()
        if body.target == line.source:
            raise BadFile(self.path, n, "a memory cannot be linked to itself")
        plan.links.append((line.source, body))
        what = f"link {line.source!r} -> {body.target!r} names memory"
        for key in (line.source, body.target):
            self.named.setdefault(key, (n, what))


async def check(c: Components, path: Path, namespace: str | None) -> Plan:
    """The plan of the import of `path` into `namespace` (default: the file's), or the
    first problem of the file as a BadFile; nothing is written."""
    header = read_header(path)
    ns = namespace or header.namespace
    plan = Plan(header=header, namespace=ns)
    names = _Names(path)
    for n, line in lines(path):
        names.read(n, line, plan=plan, settings=c.settings)
    target, caller = await _target(c, ns)
    in_target: set[str] = set()
    if caller is not None:
        async with unit_of_work(c, caller) as u:
            repo = TransferRepository(u.session)
            for chunk in _chunks(sorted(k for k in names.named if k not in names.keys)):
                in_target |= await repo.keys(caller.namespace_id, chunk)
    _missing(plan, names, target, in_target).raise_first()
    await _complete(c, caller, plan, names=names, target=target)
    return plan


def _missing(plan: Plan, names: _Names, target: _Target, in_target: set[str]) -> _Problems:
    """Each name neither in the file nor in the namespace, and each robot the file's groups
    would take from a group of the namespace the file does not set."""
    bad = _Problems(names.path, plan.namespace)
    file_robots = {r for r, _ in plan.robots}
    if plan.header.version >= SETTINGS_VERSION:  # a file with robot lines names each robot
        for robot, (n, what) in names.authors.items():
            if robot not in file_robots and robot not in target.robots:
                bad.missing(n, what, robot)
    for pool, (n, what) in names.pools.items():
        if pool not in plan.pools and pool not in target.pools:
            bad.missing(n, what, pool)
    file_groups = {g for g, _ in plan.groups}
    for group, (n, what) in names.groups.items():
        if group not in file_groups and group not in target.groups:
            bad.missing(n, what, group)
    for key, (n, what) in names.named.items():
        if key not in names.keys and key not in in_target:
            bad.missing(n, what, key)
    for group, update in plan.groups:
        for m in update.members:
            other = target.robots.get(m)
            if other is not None and other != group and other not in file_groups:
                bad.add(
                    names.seen["group", group],
                    f"robot {m!r} is in group {other!r} of namespace {plan.namespace!r}, which "
                    f"the file does not set: it cannot join group {group!r}",
                )
    return bad


async def _complete(
    c: Components, caller: Caller | None, plan: Plan, *, names: _Names, target: _Target
) -> None:
    """What the import must do beyond its lines: the supersessions, the pools (the
    namespace's too, for the memories written into them; only those that change are
    kept), the memories written one at a time."""
    for key, (_, by) in names.superseded_by.items():
        if by in names.keys:
            plan.supersedes.setdefault(by, []).append(key)
    final_group = dict(target.robots)  # each robot's group once the groups are set
    for group, _ in plan.groups:
        for robot in target.groups.get(group, []):
            final_group[robot] = None
    final_group |= names.member_of
    for pool, read in target.pools.items():
        if pool not in plan.pools:
            plan.pools[pool] = PoolState(_body(read), read.archived_at is not None)
    await _pending(c, caller, names.path, plan=plan, final_group=final_group)
    plan.pools = {
        p: s for p, s in plan.pools.items() if p in plan.staged or p not in target.pools
        or not s.matches(target.pools[p])
    }  # fmt: skip


async def _pending(
    c: Components,
    caller: Caller | None,
    path: Path,
    *,
    plan: Plan,
    final_group: dict[str, str | None],
) -> None:
    """Of the memories the import will write (not already as the file has them): the pools
    they are written into, and those written after the rest (a memory superseding others,
    and a group memory of a group its author is not in once the groups are set)."""
    superseded = plan.superseded
    pool_of: dict[str, str] = {}  # a superseded memory's pool: its superseder changes it
    superseding: dict[str, str] = {}  # a memory to add superseding others: its author
    for chunk in _chunks(memories(path)):
        rows: dict[str, Any] = {}
        if caller is not None:
            async with unit_of_work(c, caller) as u:
                repo = TransferRepository(u.session)
                rows = await repo.current(caller.namespace_id, [r.key for _, r in chunk])
        for _, r in chunk:
            if r.key in superseded and r.pool is not None:
                pool_of[r.key] = r.pool
            row = rows.get(r.key)
            w = as_now(wanted(r, superseded_later=r.key in superseded), row)
            if row is not None and same(w, row):
                continue
            for pool in {w.pool, getattr(row, "pool", None)} - {None}:
                plan.staged.setdefault(str(pool), set()).add(r.author)
            if r.key in plan.supersedes:
                superseding[r.key] = r.author
            elif w.visibility == "group" and r.group not in (None, final_group.get(r.author)):
                plan.deferred.add(r.key)
    plan.deferred |= plan.supersedes.keys()
    for by, author in superseding.items():
        for key in plan.supersedes[by]:
            if key in pool_of:
                plan.staged.setdefault(pool_of[key], set()).add(author)


def _body(p: PoolRead) -> PoolPut:
    return PoolPut(
        type=p.type,
        readers=p.readers,
        writers=p.writers,
        public_read=p.public_read,
        expires_at=p.expires_at,
    )


async def _target(c: Components, namespace: str) -> tuple[_Target, Caller | None]:
    """The namespace's robots, groups and pools, read as its admin; none when it does not
    exist (the check registers nothing)."""
    async with c.sessionmaker() as session:
        ns_id = await TransferRepository(session).namespace_id(namespace)
    if ns_id is None:
        return _Target(), None
    caller = Caller(namespace_id=ns_id, namespace=namespace, role="admin")
    async with unit_of_work(c, caller) as u:
        return (
            _Target(
                robots={r.name: r.group for r in await u.robots.list()},
                groups={g.name: g.members for g in await u.groups.list()},
                pools={p.name: p for p in await u.pools.list_pools()},
            ),
            caller,
        )


def _chunks(items: Any) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(islice(it, CHUNK)):
        yield chunk
