from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.common import NAME_PATTERN
from app.http.deps import AdminDep, UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.pools.schemas import PoolGrant, PoolPut, PoolRead

router = APIRouter(prefix="/v1/pools", tags=["pools"], route_class=ApiRoute)

PoolName = Annotated[
    str, Path(pattern=NAME_PATTERN, description="Pool name, chosen by the client", examples=["ops"])
]


@router.get("", operation_id="pools-list", summary="List pools")
async def list_pools(u: UnitDep) -> list[PoolRead]:
    """Every pool of the namespace, archived ones included, by name, with its grants; through
    a key bound to a robot, only the pools that robot may read now."""
    return await u.pools.list_pools()


@router.get("/{pool}", operation_id="pools-get", summary="Get a pool and its statistics")
async def get_pool(pool: PoolName, u: UnitDep) -> PoolRead:
    """The pool's grants, and its current memories counted by the robot that added them. A
    key bound to a robot that may not read the pool gets 404, as for one that does not exist."""
    return await u.pools.get(pool)


@router.put("/{pool}", operation_id="pools-put", summary="Create or replace a pool")
async def put_pool(pool: PoolName, body: PoolPut, _admin: AdminDep, u: UnitDep) -> PoolRead:
    """Admin only: the pool's type and grants, replaced whole (an archived pool is revived).
    A robot that loses the pool's read grant lets its memories go from working memory at
    once; its next read does not find them."""
    return await u.pools.put(pool, body)


@router.delete("/{pool}", operation_id="pools-delete", summary="Archive a pool")
async def delete_pool(pool: PoolName, _admin: AdminDep, u: UnitDep) -> PoolRead:
    """Admin only: nobody reads the pool's memories any more (they leave every working
    memory); they are kept, exported, and read again once a PUT revives the pool."""
    return await u.pools.delete(pool)


@router.put("/{pool}/grants/{robot}", operation_id="pools-grant", summary="Grant a robot a pool")
async def grant(
    pool: PoolName, robot: RobotName, body: PoolGrant, *, _admin: AdminDep, u: UnitDep
) -> PoolRead:
    """Admin only: `read`, or `write` (which reads too); replaces the robot's grant."""
    return await u.pools.grant(pool, robot, body.level)


@router.delete(
    "/{pool}/grants/{robot}", operation_id="pools-revoke", summary="Revoke a robot's grant"
)
async def revoke(pool: PoolName, robot: RobotName, _admin: AdminDep, u: UnitDep) -> PoolRead:
    """Admin only: the robot no longer reads or writes the pool (unless it is public), from
    this response on: its working memory has let the pool's memories go."""
    return await u.pools.revoke(pool, robot)
