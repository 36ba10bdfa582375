from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.common import NAME_PATTERN
from app.groups.schemas import GroupRead, GroupUpdate
from app.http.deps import UnitDep
from app.http.routing import ApiRoute

router = APIRouter(prefix="/v1/groups", tags=["groups"], route_class=ApiRoute)

GroupName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN, description="Group name, chosen by the client", examples=["support"]
    ),
]


@router.get("", operation_id="groups-list", summary="List robot groups")
async def list_groups(u: UnitDep) -> list[GroupRead]:
    """Every group of the caller's namespace, by name, with its members."""
    return await u.groups.list()


@router.get("/{group}", operation_id="groups-get", summary="Get a robot group")
async def get_group(group: GroupName, u: UnitDep) -> GroupRead:
    """The group's members and its working memory's budget."""
    return await u.groups.get(group)


@router.put("/{group}", operation_id="groups-put", summary="Create or update a robot group")
async def put_group(group: GroupName, body: GroupUpdate, u: UnitDep) -> GroupRead:
    """Sets the group's members (who then share its working memory: any member reads and
    writes it) and its budget. A robot is in at most one group: one of another group is a 409
    and nothing changes."""
    return await u.groups.put(group, body)


@router.delete("/{group}", operation_id="groups-delete", summary="Delete a robot group")
async def delete_group(group: GroupName, u: UnitDep) -> GroupRead:
    """Clears the shared working memory and dissolves the group; returns what it was."""
    return await u.groups.delete(group)
