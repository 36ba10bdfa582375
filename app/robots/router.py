from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from app.common import RobotName
from app.deps import AdminDep, ScopeDep
from app.robots.schemas import RobotRead, RobotUpdate
from app.robots.service import RobotService
from app.routing import OrjsonRoute

router = APIRouter(prefix="/v1/robots", tags=["robots"], route_class=OrjsonRoute)


async def robot_service(r: ScopeDep) -> RobotService:
    return r.robots


Service = Annotated[RobotService, Depends(robot_service)]


@router.get("", operation_id="robots-list", summary="List robots")
async def list_robots(service: Service) -> list[RobotRead]:
    """Every robot registered in the caller's namespace, by name."""
    return await service.list()


@router.get("/{robot}", operation_id="robots-get", summary="Get a robot")
async def get_robot(robot: RobotName, service: Service) -> RobotRead:
    """One robot and its effective working-memory budget."""
    return await service.get(robot)


@router.put("/{robot}", operation_id="robots-put", summary="Register or update a robot")
async def put_robot(robot: RobotName, body: RobotUpdate, service: Service) -> RobotRead:
    """Registers the robot if new; sets its budget and session TTL (null = the default)."""
    return await service.put(robot, body)


@router.delete(
    "/{robot}",
    operation_id="robots-delete",
    summary="Remove a robot that holds nothing",
)
async def delete_robot(robot: RobotName, service: Service, _: AdminDep) -> RobotRead:
    """Admin: removes a robot with nothing in long-term memory (forgotten memories included),
    no session and an empty working memory; else 409 with what it still `holds`."""
    return await service.remove(robot)
