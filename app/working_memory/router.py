from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Response

from app.auth.caller import CallerDep
from app.common import RobotName
from app.deps import ResourcesDep, SessionDep
from app.robots.service import RobotService
from app.routing import OrjsonRoute
from app.working_memory.protocol import WriteProtocol, from_us
from app.working_memory.schemas import (
    ContextRead,
    WorkingMemoryCleared,
    WorkingMemoryEntry,
    WorkingMemoryRead,
)
from app.working_memory.service import WorkingMemoryService

router = APIRouter(prefix="/v1/robots/{robot}", tags=["working-memory"], route_class=OrjsonRoute)


@dataclass(frozen=True)
class Deps:
    robots: RobotService
    working_memory: WorkingMemoryService
    two_tier: WriteProtocol


# An async function, not the class itself: FastAPI runs a plain function or class in a worker
# thread, and that hop costs more than everything these constructors do.
async def get_deps(session: SessionDep, caller: CallerDep, res: ResourcesDep) -> Deps:
    two_tier = res.write_protocol(session, caller.namespace_id, caller.namespace)
    return Deps(RobotService(session, caller, res), WorkingMemoryService(two_tier), two_tier)


DepsDep = Annotated[Deps, Depends(get_deps)]


@router.get("/working-memory", operation_id="working-memory-get", summary="Inspect working memory")
async def get_working_memory(robot: RobotName, deps: DepsDep) -> WorkingMemoryRead:
    """The robot's working set in eviction order (next victim first), with its token use."""
    rb = await deps.robots.require(robot)
    items, tokens, degraded = await deps.working_memory.snapshot(rb)
    return WorkingMemoryRead(
        robot=rb.name,
        tokens=tokens,
        max_tokens=rb.budget,
        utilization=round(100.0 * tokens / rb.budget, 2),
        items=[
            WorkingMemoryEntry(
                key=i.key,
                content=i.content,
                tokens=i.tokens,
                importance=i.importance,
                added_at=from_us(i.added_at_us),
                last_access_at=from_us(i.last_access_ms * 1000),
                from_recall=i.from_recall,
            )
            for i in items
        ],
        degraded=degraded,
    )


@router.delete(
    "/working-memory", operation_id="working-memory-clear", summary="Clear working memory"
)
async def clear_working_memory(robot: RobotName, deps: DepsDep) -> WorkingMemoryCleared:
    """Empties the robot's working memory; long-term memory is untouched."""
    rb = await deps.robots.require(robot)
    return WorkingMemoryCleared(robot=rb.name, removed=await deps.two_tier.clear(rb))


@router.get(
    "/context", operation_id="context-get", summary="Assemble context", response_model=ContextRead
)
async def get_context(
    robot: RobotName,
    deps: DepsDep,
    strategy: Annotated[
        Literal["recent", "important", "balanced"],
        Query(
            description="recent: last access first; important: importance first; "
            "balanced: importance × 1/(1 + hours since added)"
        ),
    ] = "balanced",
    max_tokens: Annotated[
        int | None, Query(ge=1, le=10_000_000, description="Default: the robot's budget")
    ] = None,
) -> Response:
    """Prompt-ready text from working memory, within a token budget."""
    rb = await deps.robots.require(robot)
    limit = max_tokens or rb.budget
    result, degraded = await deps.working_memory.context(rb, strategy, limit)
    # Written with orjson and returned as it is: ContextRead documents the body, but having
    # FastAPI validate the dict against it and serialize it again cost ~0.3 ms of a ~3 ms
    # request. The store and assemble() build the items with the schema's types.
    body = {
        "robot": rb.name,
        "strategy": result.strategy,
        "text": result.text,
        "items": result.items,
        "tokens": result.tokens,
        "max_tokens": limit,
        "degraded": degraded,
    }
    return Response(orjson.dumps(body), media_type="application/json")
