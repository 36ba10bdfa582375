from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.common import NAME_PATTERN
from app.http.deps import AdminDep, UnitDep
from app.http.params import TimeframeQuery
from app.http.routing import ApiRoute
from app.tags.schemas import TagRename, TagRenamed, TagTree

router = APIRouter(prefix="/v1/tags", tags=["tags"], route_class=ApiRoute)


@router.get("", operation_id="tags-tree", summary="The tag tree")
async def tag_tree(
    u: UnitDep,
    robot: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Only memories this robot authored")
    ] = None,
    timeframe: TimeframeQuery = None,
) -> TagTree:
    """The namespace's tags as a tree of `:` segments, with memory counts per node."""
    return await u.tags.tree(robot, timeframe)


@router.post("/rename", operation_id="tags-rename", summary="Rename or merge a tag subtree")
async def rename_tags(_admin: AdminDep, body: TagRename, u: UnitDep) -> TagRenamed:
    """Admin only: moves a tag and its descendants under another path, merging if it exists."""
    return await u.tags.rename(body.from_, body.to)
