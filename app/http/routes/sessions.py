from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.http.deps import UnitDep, WriterDep
from app.http.params import RobotName, SessionName
from app.http.routing import ApiRoute
from app.sessions.schemas import MessagesAppend, MessagesAppended, SessionEnded, SessionWindow

router = APIRouter(
    prefix="/v1/robots/{robot}/sessions/{session}", tags=["sessions"], route_class=ApiRoute
)


@router.post(
    "/messages",
    status_code=status.HTTP_201_CREATED,
    operation_id="sessions-append",
    summary="Append messages to a session",
)
async def append_messages(
    robot: RobotName, session: SessionName, body: MessagesAppend, u: UnitDep
) -> MessagesAppended:
    """Stores the messages durably (starting the session if needed), then in its hot window."""
    return await u.sessions.append(robot, session, body)


@router.get("/messages", operation_id="sessions-window", summary="Read a session's window")
async def get_window(
    robot: RobotName,
    session: SessionName,
    u: UnitDep,
    *,
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
    return await u.sessions.window(robot, session, n, max_tokens)


@router.delete("/messages", operation_id="sessions-end", summary="End a session")
async def end_session(robot: RobotName, session: SessionName, u: UnitDep) -> SessionEnded:
    """Promotes the messages worth keeping into long-term memory and deletes the session."""
    return await u.sessions.end(robot, session)
