from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from app.common import RobotName
from app.deps import ScopeDep
from app.recall.schemas import RecallRequest, RecallResult
from app.recall.service import RecallService
from app.routing import OrjsonRoute

router = APIRouter(prefix="/v1/robots/{robot}", tags=["recall"], route_class=OrjsonRoute)


async def recall_service(r: ScopeDep) -> RecallService:
    c = r.components
    return RecallService(
        r.session,
        r.caller,
        r.robots,
        r.two_tier,
        c.embedder,
        c.search_caches,
        c.settings,
        c.clock,
        c.reranker,
        c.metrics,
        c.access,
    )


@router.post("/recall", operation_id="recall-search", summary="Recall memories")
async def recall(
    robot: RobotName,
    body: RecallRequest,
    service: Annotated[RecallService, Depends(recall_service)],
) -> RecallResult:
    """Searches long-term memory (vector, full text, or hybrid: the two fused, optionally
    blended with relevance signals and reranked) and loads the hits into the robot's working
    memory."""
    return await service.recall(robot, body)
