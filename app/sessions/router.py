from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status

from app.common import RobotName
from app.deps import ScopeDep, WriterDep
from app.memories.router import memory_service
from app.routing import OrjsonRoute
from app.sessions.consolidation import Consolidator
from app.sessions.schemas import (
    MessagesAppend,
    MessagesAppended,
    SessionEnded,
    SessionName,
    SessionWindow,
)
from app.sessions.service import SessionService

router = APIRouter(
    prefix="/v1/robots/{robot}/sessions/{session}", tags=["sessions"], route_class=OrjsonRoute
)


async def session_service(r: ScopeDep) -> SessionService:
    c = r.components
    consolidator = Consolidator(r.session, await memory_service(r), c.session_hot, c.settings)
    return SessionService(
        r.session,
        r.caller,
        r.robots,
        c.session_hot,
        c.two_tier.breaker,
        c.tokenizer,
        c.settings,
        c.clock,
        consolidator,
    )


Service = Annotated[SessionService, Depends(session_service)]


@router.post(
    "/messages",
    status_code=status.HTTP_201_CREATED,
    operation_id="sessions-append",
    summary="Append messages to a session",
)
async def append_messages(
    robot: RobotName, session: SessionName, body: MessagesAppend, service: Service
) -> MessagesAppended:
    """Stores the messages durably (starting the session if needed), then in its hot window."""
    return await service.append(robot, session, body)


@router.get("/messages", operation_id="sessions-window", summary="Read a session's window")
async def get_window(
    robot: RobotName,
    session: SessionName,
    service: Service,
    _: WriterDep,
    n: Annotated[
        int | None, Query(ge=1, le=1000, description="The last n messages (default 50)")
    ] = None,
    max_tokens: Annotated[
        int | None,
        Query(ge=1, le=10_000_000, description="As many of the last messages as fit"),
    ] = None,
) -> SessionWindow:
    """The last messages, oldest first; the read refreshes the session and counts as an
    access of each message returned, so it needs a writer key."""
    return await service.window(robot, session, n, max_tokens)


@router.delete("/messages", operation_id="sessions-end", summary="End a session")
async def end_session(robot: RobotName, session: SessionName, service: Service) -> SessionEnded:
    """Promotes the messages worth keeping into long-term memory and deletes the session."""
    return await service.end(robot, session)
