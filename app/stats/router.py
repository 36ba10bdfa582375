from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from app.common import RobotName
from app.deps import ScopeDep
from app.routing import OrjsonRoute
from app.stats.schemas import NamespaceStats, RobotStats
from app.stats.service import StatsService
from app.working_memory.service import WorkingMemoryService

router = APIRouter(tags=["stats"], route_class=OrjsonRoute)


async def stats_service(r: ScopeDep) -> StatsService:
    working_memory = WorkingMemoryService(r.two_tier)
    c = r.components
    return StatsService(
        r.session,
        r.caller,
        r.robots,
        working_memory,
        c.clock,
        c.embedder.query_cache,
        c.server_facts,
    )


Service = Annotated[StatsService, Depends(stats_service)]


@router.get("/v1/robots/{robot}/stats", operation_id="stats-robot", summary="Robot statistics")
async def robot_stats(
    robot: RobotName,
    service: Service,
    days: Annotated[int, Query(ge=1, le=366, description="Days of activity to report")] = 30,
) -> RobotStats:
    """Working-memory use, long-term memories authored, and activity per day."""
    return await service.robot(robot, days)


@router.get("/v1/stats", operation_id="stats-namespace", summary="Namespace statistics")
async def namespace_stats(service: Service) -> NamespaceStats:
    """Memory counts and size, robots' working-memory use, and versions in use."""
    return await service.namespace()
