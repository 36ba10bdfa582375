from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status

from app.common import KEY_PATTERN
from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.state.schemas import StateList, StatePut, StateRead, StateScope
from app.state.service import etag

router = APIRouter(prefix="/v1/robots/{robot}/state", tags=["state"], route_class=ApiRoute)

StateKey = Annotated[str, Path(pattern=KEY_PATTERN, description="State key")]
Scope = Annotated[
    StateScope,
    Query(description="`robot`: the robot's own state; `group`: its group's (a blackboard)"),
]
IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        pattern=r'^\s*(\*|(W/)?"?[0-9]{1,19}"?)?\s*$',
        description='Write only if the key is at this version (its ETag, "12", or 12); '
        "* : only if it exists. Else 412",
    ),
]
IfNoneMatch = Annotated[
    str | None,
    Header(
        alias="If-None-Match",
        pattern=r"^\s*\*?\s*$",
        description="* : create only (412 if the key exists)",
    ),
]


def _given(header: str | None) -> str | None:
    """An empty header is an absent one."""
    return header if header and header.strip() else None


@router.put("/{key}", operation_id="state-put", summary="Write a state key")
async def put_state(
    robot: RobotName,
    key: StateKey,
    body: StatePut,
    u: UnitDep,
    response: Response,
    scope: Scope = "robot",
    if_match: IfMatch = None,
    if_none_match: IfNoneMatch = None,
) -> StateRead:
    """A new version of the key (durable, then copied to Redis); ETag: its version."""
    read = await u.state.put(
        robot, key, body, scope=scope, if_match=_given(if_match),
        if_none_match=_given(if_none_match),
    )  # fmt: skip
    response.headers["ETag"] = etag(read.version)
    return read


@router.get("/{key}", operation_id="state-get", summary="Read a state key")
async def get_state(
    robot: RobotName, key: StateKey, u: UnitDep, response: Response, scope: Scope = "robot"
) -> StateRead:
    """The key's current value; 404 once deleted or expired. ETag: its version."""
    read = await u.state.get(robot, key, scope=scope)
    response.headers["ETag"] = etag(read.version)
    return read


@router.delete(
    "/{key}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="state-delete",
    summary="Delete a state key",
)
async def delete_state(
    robot: RobotName, key: StateKey, u: UnitDep, scope: Scope = "robot", if_match: IfMatch = None
) -> Response:
    """Deletes the key (404 if absent or expired)."""
    await u.state.delete(robot, key, scope=scope, if_match=_given(if_match))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", operation_id="state-list", summary="List state keys")
async def list_state(
    robot: RobotName,
    u: UnitDep,
    scope: Scope = "robot",
    after: Annotated[
        str | None, Query(pattern=KEY_PATTERN, description="The previous page's `next`")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Keys per page")] = 100,
    values: Annotated[bool, Query(description="Include each key's value")] = False,
) -> StateList:
    """The live keys in key order: versions, expiry, pins (values on request)."""
    return await u.state.page(robot, scope=scope, after=after, limit=limit, values=values)
