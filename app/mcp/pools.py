"""The pool tools' runs (app/mcp/tools.py's table names them): a pool as a compact line."""

from __future__ import annotations

from app.mcp.schemas import Pool, PoolGrantIn, PoolPutIn, Pools, PoolsIn
from app.pools.schemas import PoolPut, PoolRead
from app.unit import UnitOfWork

Answer = tuple[Pool | Pools, str]


def pool_line(p: PoolRead) -> tuple[Pool, str]:
    out = Pool(
        pool=p.name,
        type=p.type,
        readers=p.readers,
        writers=p.writers,
        public_read=p.public_read,
        archived=p.archived_at is not None,
        memories=p.stats.memories if p.stats else None,
    )
    grants = f"read: {', '.join(p.readers) or '-'}; write: {', '.join(p.writers) or '-'}"
    extra = f", {out.memories} memories" if out.memories is not None else ""
    state = " (archived)" if out.archived else (" (public)" if p.public_read else "")
    return out, f"pool {p.name} {p.type}{state}: {grants}{extra}"


async def list_pools(u: UnitOfWork, i: PoolsIn, robot: str) -> Answer:
    pools = [await u.pools.get(i.pool)] if i.pool else await u.pools.list_pools()
    found = [pool_line(p) for p in pools]
    return Pools(pools=[o for o, _ in found]), "\n".join(t for _, t in found) or "no pools"


async def put_pool(u: UnitOfWork, i: PoolPutIn, robot: str) -> Answer:
    body = PoolPut.model_validate(i.model_dump(exclude={"pool"}))
    return pool_line(await u.pools.put(i.pool, body))


async def grant_pool(u: UnitOfWork, i: PoolGrantIn, robot: str) -> Answer:
    if i.level == "none":
        return pool_line(await u.pools.revoke(i.pool, i.robot))
    return pool_line(await u.pools.grant(i.pool, i.robot, i.level))
