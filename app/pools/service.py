"""Pools: create and grant (admin), and the checks the memories' service asks before an add
into a pool and a recall of pools. A grant taken away withdraws the pool's memories from the
working memory of every robot that may no longer read them, through the write protocol, in
the request: their next read (the change stream too) no longer has them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.auth.caller import Caller
from app.db.session import DbSession
from app.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.pools.repository import PoolRepository
from app.pools.schemas import Level, PoolPut, PoolRead, PoolStats
from app.working_memory.model import Holder
from app.working_memory.protocol import WriteProtocol


class PoolService:
    def __init__(self, *, session: DbSession, caller: Caller, two_tier: WriteProtocol) -> None:
        self.session = session
        self.caller = caller
        self.two_tier = two_tier
        self.repo = PoolRepository(session)

    async def _row(self, name: str, *, lock: bool = False) -> Any:
        row = await self.repo.get(self.caller.namespace_id, name, lock=lock)
        if row is None:
            raise NotFound(f"pool {name!r} does not exist")
        return row

    async def list_pools(self) -> list[PoolRead]:
        """Every pool; through a key bound to a robot, the pools it may read (a pool it may
        not read is not there for it: app/visibility.py)."""
        rows = await self.repo.in_namespace(self.caller.namespace_id, self.caller.robot)
        return [_read(r) for r in rows]

    async def get(self, name: str) -> PoolRead:
        """As `list_pools` shows it: a robot's key gets 404 for a pool it may not read."""
        row = await self.repo.get(self.caller.namespace_id, name, reader=self.caller.robot)
        if row is None:
            raise NotFound(f"pool {name!r} does not exist")
        by_author = await self.repo.stats(row.id)
        stats = PoolStats(
            memories=sum(r.memories for r in by_author),
            tokens=sum(r.tokens for r in by_author),
            by_author={r.author: r.memories for r in by_author},
        )
        return _read(row).model_copy(update={"stats": stats})

    async def put(self, name: str, body: PoolPut) -> PoolRead:
        """Create the pool or replace its settings. An expiry already past ends an open pool
        now (its memories are read by nobody at once); a pool cannot be created, or revived
        from its archive, already expired (422)."""
        current = await self.repo.get(self.caller.namespace_id, name, lock=True)
        opens = current is None or current.archived_at is not None
        if opens and body.expires_at is not None and body.expires_at <= await self.repo.now():
            message = f"is {body.expires_at.isoformat()}, already past: the pool would never open"
            raise Unprocessable(
                f"expires_at: {message}", errors=[{"field": "expires_at", "message": message}]
            )
        row = await self.repo.put(
            self.caller.namespace_id,
            name,
            body.type,
            readers=_unique(body.readers),
            writers=_unique(body.writers),
            public_read=body.public_read,
            expires_at=body.expires_at,
        )
        await self._withdraw_lost(row.id)
        return _read(row)

    async def grant(self, name: str, robot: str, level: Level) -> PoolRead:
        row = await self._row(name, lock=True)
        readers = [r for r in row.readers if r != robot]
        writers = [r for r in row.writers if r != robot]
        (writers if level == "write" else readers).append(robot)
        return await self._replace(row, readers, writers)

    async def revoke(self, name: str, robot: str) -> PoolRead:
        row = await self._row(name, lock=True)
        readers = [r for r in row.readers if r != robot]
        writers = [r for r in row.writers if r != robot]
        return await self._replace(row, readers, writers)

    async def _replace(self, row: Any, readers: list[str], writers: list[str]) -> PoolRead:
        new = await self.repo.put(
            self.caller.namespace_id,
            row.name,
            row.type,
            readers=readers,
            writers=writers,
            public_read=row.public_read,
            expires_at=row.expires_at,
        )
        await self._withdraw_lost(new.id)
        return _read(new)

    async def delete(self, name: str) -> PoolRead:
        """Archive the pool: its memories are kept (export has them, a PUT revives the
        pool), read by nobody meanwhile."""
        row = await self.repo.archive((await self._row(name, lock=True)).id)
        await self._withdraw_lost(row.id)
        return _read(row)

    async def expire(self) -> list[str]:
        """Archive the task pools past their expiry (the retention run calls this)."""
        names = []
        for row in await self.repo.expired(self.caller.namespace_id):
            await self.repo.archive(row.id)
            await self._withdraw_lost(row.id)
            names.append(row.name)
        return names

    async def _withdraw_lost(self, pool_id: int) -> None:
        """Commit the change, with the holders that lost the pool marked in the same
        transaction, then withdraw the memories from their working memories."""
        held = [
            (Holder(r.robot_id, r.robot), r.memory_id, r.key)
            for r in await self.repo.lost_holders(pool_id)
        ]
        await self.two_tier.mark_unreadable(held)
        await self.two_tier.commit_durable()
        await self.two_tier.withdraw_each(held)

    # --- checks for the memories' service and recall -------------------------------------

    async def writable(self, robot: str, name: str) -> tuple[int, str]:
        """The pool `robot` adds into: (id, name); 404 unknown, 409 archived or expired,
        403 without the write grant."""
        row = await self._row(name)
        if not row.open:
            raise Conflict(f"pool {name!r} is archived or expired", pool=name)
        if robot not in row.writers:
            raise Forbidden(f"robot {robot!r} may not write to pool {name!r}", pool=name)
        return row.id, row.name

    async def check_readable(self, robot: str, names: Sequence[str]) -> None:
        """A recall's `pools`: each one exists (404) and `robot` may read it (403)."""
        for name in names:
            row = await self._row(name)
            if not (row.open and (row.public_read or robot in (*row.readers, *row.writers))):
                raise Forbidden(f"robot {robot!r} may not read pool {name!r}", pool=name)


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _read(row: Any) -> PoolRead:
    return PoolRead(
        name=row.name,
        type=row.type,
        readers=list(row.readers),
        writers=list(row.writers),
        public_read=row.public_read,
        expires_at=row.expires_at,
        archived_at=row.archived_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
