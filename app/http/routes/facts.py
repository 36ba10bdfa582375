from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status

from app.errors import PROBLEM_JSON
from app.facts.schemas import FactsExtract, FactsExtracted
from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute

router = APIRouter(prefix="/v1/robots/{robot}/facts", tags=["facts"], route_class=ApiRoute)

UNUSABLE: dict[str, Any] = {
    "description": "The LLM answered something unusable (not JSON, not the shape asked "
    "for): nothing was written",
    "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    operation_id="facts-extract",
    summary="Extract facts from a conversation (LLM)",
    responses={502: UNUSABLE},
)
async def extract_facts(robot: RobotName, body: FactsExtract, u: UnitDep) -> FactsExtracted:
    """The configured LLM reads the turns (memories by `keys`, or a conversation's by
    `session`) and its atomic facts and preferences are added as memories, each linked
    `derived_from` to its turns; all or nothing. 409 without an LLM; 503 when it cannot
    answer (down, timed out); 502 when its answer is unusable."""
    return await u.facts.extract(robot, body)
