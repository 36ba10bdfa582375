from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from app.common import RobotName
from app.deps import ScopeDep
from app.prompt.schemas import PromptRequest, PromptResult
from app.prompt.service import PromptService
from app.recall.router import recall_service
from app.routing import OrjsonRoute
from app.sessions.router import session_service
from app.working_memory.service import WorkingMemoryService

router = APIRouter(prefix="/v1/robots/{robot}", tags=["prompt"], route_class=OrjsonRoute)


async def prompt_service(r: ScopeDep) -> PromptService:
    c = r.components
    return PromptService(
        r.robots,
        WorkingMemoryService(r.two_tier, r.robots),
        await recall_service(r),
        await session_service(r),
        c.tokenizer,
        c.settings,
    )


@router.post("/prompt", operation_id="prompt-assemble", summary="Assemble a prompt")
async def assemble_prompt(
    robot: RobotName,
    body: PromptRequest,
    service: Annotated[PromptService, Depends(prompt_service)],
) -> PromptResult:
    """Chat messages from the input, a session, working memory and recalled memories, whose
    token count never exceeds the context window minus the reserves, with a manifest of
    every candidate (included, or why not)."""
    return await service.prompt(robot, body)
