from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import ReadUnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.recall.schemas import RecallRequest, RecallResult

router = APIRouter(prefix="/v1/robots/{robot}", tags=["recall"], route_class=ApiRoute)


@router.post("/recall", operation_id="recall-search", summary="Recall memories")
async def recall(
    robot: RobotName,
    body: RecallRequest,
    u: ReadUnitDep,
) -> RecallResult:
    """Searches long-term memory (vector, full text, or hybrid: the two fused, optionally
    blended with relevance signals and reranked) and loads the hits into the robot's working
    memory. Its search may run on a read replica (`HTM-Consistency-Token`)."""
    return await u.recall.recall(robot, body)
