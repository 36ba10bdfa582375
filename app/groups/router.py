from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from app.common import NAME_PATTERN
from app.deps import ScopeDep
from app.groups.schemas import GroupRead, GroupUpdate
from app.groups.service import GroupService
from app.routing import OrjsonRoute

router = APIRouter(prefix="/v1/groups", tags=["groups"], route_class=OrjsonRoute)

GroupName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN, description="Group name, chosen by the client", examples=["support"]
    ),
]


async def group_service(r: ScopeDep) -> GroupService:
    c = r.components
    return GroupService(
        r.session, r.caller, r.two_tier, c.two_tier.robots, c.settings.working_memory_budget
    )


Service = Annotated[GroupService, Depends(group_service)]


@router.get("", operation_id="groups-list", summary="List robot groups")
async def list_groups(service: Service) -> list[GroupRead]:
    """Every group of the caller's namespace, by name, with its members."""
    return await service.list()


@router.get("/{group}", operation_id="groups-get", summary="Get a robot group")
async def get_group(group: GroupName, service: Service) -> GroupRead:
    """The group's members and its working memory's budget."""
    return await service.get(group)


@router.put("/{group}", operation_id="groups-put", summary="Create or update a robot group")
async def put_group(group: GroupName, body: GroupUpdate, service: Service) -> GroupRead:
    """Sets the group's members (who then share its working memory: any member reads and
    writes it) and its budget. A robot is in at most one group: one of another group is a 409
    and nothing changes."""
    return await service.put(group, body)


@router.delete("/{group}", operation_id="groups-delete", summary="Delete a robot group")
async def delete_group(group: GroupName, service: Service) -> GroupRead:
    """Clears the shared working memory and dissolves the group; returns what it was."""
    return await service.delete(group)
