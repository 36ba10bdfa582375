from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.http.deps import ReadUnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.stats.schemas import NamespaceStats, RobotStats

router = APIRouter(tags=["stats"], route_class=ApiRoute)


@router.get("/v1/robots/{robot}/stats", operation_id="stats-robot", summary="Robot statistics")
async def robot_stats(
    robot: RobotName,
    u: ReadUnitDep,
    days: Annotated[int, Query(ge=1, le=366, description="Days of activity to report")] = 30,
) -> RobotStats:
    """Working-memory use, long-term memories authored, and activity per day."""
    return await u.stats.robot(robot, days)


@router.get("/v1/stats", operation_id="stats-namespace", summary="Namespace statistics")
async def namespace_stats(u: ReadUnitDep) -> NamespaceStats:
    """Memory counts and size, robots' working-memory use, and versions in use. Through a key
    bound to a robot: only the memories that robot may read, and its own working memory."""
    return await u.stats.namespace()
