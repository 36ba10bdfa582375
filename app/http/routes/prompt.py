from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.prompt.schemas import PromptRequest, PromptResult

router = APIRouter(prefix="/v1/robots/{robot}", tags=["prompt"], route_class=ApiRoute)


@router.post("/prompt", operation_id="prompt-assemble", summary="Assemble a prompt")
async def assemble_prompt(
    robot: RobotName,
    body: PromptRequest,
    u: UnitDep,
) -> PromptResult:
    """Chat messages from the input, a session, working memory and recalled memories, whose
    token count never exceeds the context window minus the reserves, with a manifest of
    every candidate (included, or why not)."""
    return await u.prompt.prompt(robot, body)
