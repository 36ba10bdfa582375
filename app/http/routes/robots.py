from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import AdminDep, UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.robots.schemas import RobotRead, RobotUpdate

router = APIRouter(prefix="/v1/robots", tags=["robots"], route_class=ApiRoute)


@router.get("", operation_id="robots-list", summary="List robots")
async def list_robots(u: UnitDep) -> list[RobotRead]:
    """Every robot registered in the caller's namespace, by name."""
    return await u.robots.list()


@router.get("/{robot}", operation_id="robots-get", summary="Get a robot")
async def get_robot(robot: RobotName, u: UnitDep) -> RobotRead:
    """One robot and its effective working-memory budget."""
    return await u.robots.get(robot)


@router.put("/{robot}", operation_id="robots-put", summary="Register or update a robot")
async def put_robot(robot: RobotName, body: RobotUpdate, u: UnitDep) -> RobotRead:
    """Registers the robot if new; sets its budget and session TTL (null = the default)."""
    return await u.robots.put(robot, body)


@router.delete(
    "/{robot}",
    operation_id="robots-delete",
    summary="Remove a robot that holds nothing",
)
async def delete_robot(robot: RobotName, u: UnitDep, _: AdminDep) -> RobotRead:
    """Admin: removes a robot with nothing in long-term memory (forgotten memories included),
    no session and an empty working memory; else 409 with what it still `holds`."""
    return await u.robots.remove(robot)
