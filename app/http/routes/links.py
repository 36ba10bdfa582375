from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.http.deps import UnitDep
from app.http.params import MemoryKeyPath, RobotName
from app.http.routing import ApiRoute
from app.relationships.schemas import LinkCreate, LinkRead, LinkType, Related, Unlinked

router = APIRouter(prefix="/v1/robots/{robot}/memories", tags=["memories"], route_class=ApiRoute)


@router.post(
    "/{key}/links",
    status_code=status.HTTP_201_CREATED,
    operation_id="memories-link",
    summary="Link a memory to another",
    responses={200: {"description": "The link was there: its weight is now this one"}},
)
async def link_memory(
    robot: RobotName, key: MemoryKeyPath, body: LinkCreate, *, u: UnitDep, response: Response
) -> LinkRead:
    """Records that the memory is `type` to `target` (201); repeating it sets the weight (200)."""
    link = await u.links.link(robot, key, body)
    if not link.created:
        response.status_code = status.HTTP_200_OK
    return link


@router.delete(
    "/{key}/links/{target}", operation_id="memories-unlink", summary="Remove a memory's link"
)
async def unlink_memory(
    robot: RobotName,
    key: MemoryKeyPath,
    target: MemoryKeyPath,
    *,
    u: UnitDep,
    type: Annotated[LinkType | None, Query(description="Only this type (default: every)")] = None,
) -> Unlinked:
    """Removes the explicit links from the memory to `target` (the derived ones follow the
    memories: tags, supersede, derived-from)."""
    return await u.links.unlink(robot, key, target, type)


@router.get(
    "/{key}/related", operation_id="memories-related", summary="The memories related to one"
)
async def related_memories(
    robot: RobotName,
    key: MemoryKeyPath,
    u: UnitDep,
    *,
    depth: Annotated[int, Query(ge=1, le=3, description="Edges away, at most")] = 1,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    type: Annotated[
        list[LinkType] | None, Query(description="Only edges of these types (repeatable)")
    ] = None,
) -> Related:
    """Each memory reached through links, either way, up to `depth` edges: by its best path
    (the product of the weights), ordered by weight, then depth, then key."""
    return await u.links.related(robot, key, depth, limit=limit, types=type)
