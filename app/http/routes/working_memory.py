from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from app.auth.caller import rechecker
from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.working_memory.events import ChangeStream
from app.working_memory.schemas import ContextRead, WorkingMemoryCleared, WorkingMemoryRead
from app.working_memory.store import Strategy

router = APIRouter(prefix="/v1/robots/{robot}", tags=["working-memory"], route_class=ApiRoute)


@router.get("/working-memory", operation_id="working-memory-get", summary="Inspect working memory")
async def get_working_memory(robot: RobotName, u: UnitDep) -> WorkingMemoryRead:
    """The robot's working set in eviction order (next victim first), with its token use."""
    return await u.working_memory.read(robot)


@router.get(
    "/working-memory/events",
    operation_id="working-memory-events",
    summary="Follow working-memory changes (server-sent events)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "text/event-stream: `snapshot` first (unless resuming), then "
            "`added`, `evicted`, `removed`, `cleared`, each with its stream id",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "description": "Each event's `data`: a JSON object (see the summary)",
                    }
                }
            },
        }
    },
)
async def follow_working_memory(
    robot: RobotName,
    u: UnitDep,
    request: Request,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="Resume after this event (a browser's EventSource sends it itself)",
        ),
    ] = None,
) -> StreamingResponse:
    """The robot's working-memory changes as they happen (its group's, in a group): what a
    standby agent follows to take over at once. See app/working_memory/events.py."""
    c = u.components
    # Idle, the stream wakes at least every 0.5 s: to check its key (see events.py).
    block_ms = max(1, min(500, int(c.settings.redis_timeout_s * 500)))
    allowed = rechecker(
        request.headers.get("authorization", ""),
        auth_enabled=c.settings.auth_enabled,
        sessionmaker=c.sessionmaker,
        key_cache=c.key_cache,
    )
    events = await ChangeStream(u.working_memory, block_ms, allowed).open(robot, last_event_id)
    # Nothing below needs PostgreSQL: the request's connection goes back to the pool now.
    await u.session.commit()
    await u.session.release()
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.delete(
    "/working-memory", operation_id="working-memory-clear", summary="Clear working memory"
)
async def clear_working_memory(robot: RobotName, u: UnitDep) -> WorkingMemoryCleared:
    """Empties the robot's working memory; long-term memory is untouched."""
    return await u.working_memory.clear(robot)


@router.get(
    "/context", operation_id="context-get", summary="Assemble context", response_model=ContextRead
)
async def get_context(
    robot: RobotName,
    u: UnitDep,
    strategy: Annotated[
        Strategy,
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
    body = await u.working_memory.context_body(robot, strategy, max_tokens)
    return Response(orjson.dumps(body), media_type="application/json")
