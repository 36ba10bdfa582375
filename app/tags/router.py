from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from app.common import NAME_PATTERN
from app.deps import AdminDep, ScopeDep
from app.routing import OrjsonRoute
from app.tags.repository import TagRepository
from app.tags.schemas import TagRename, TagRenamed, TagTree
from app.tags.service import TagService
from app.timeframes.http import TimeframeQuery

router = APIRouter(prefix="/v1/tags", tags=["tags"], route_class=OrjsonRoute)


async def tag_service(r: ScopeDep) -> TagService:
    return TagService(TagRepository(r.session), r.caller.namespace_id, r.robots, r.components.clock)


Service = Annotated[TagService, Depends(tag_service)]


@router.get("", operation_id="tags-tree", summary="The tag tree")
async def tag_tree(
    service: Service,
    robot: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Only memories this robot authored")
    ] = None,
    timeframe: TimeframeQuery = None,
) -> TagTree:
    """The namespace's tags as a tree of `:` segments, with memory counts per node."""
    return await service.tree(robot, timeframe)


@router.post("/rename", operation_id="tags-rename", summary="Rename or merge a tag subtree")
async def rename_tags(_admin: AdminDep, body: TagRename, service: Service) -> TagRenamed:
    """Admin only: moves a tag and its descendants under another path, merging if it exists."""
    return await service.rename(body.from_, body.to)
