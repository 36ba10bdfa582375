from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.common import Page, Text
from app.entities.extract import Kind
from app.entities.schemas import ENTITY_DESCRIPTION, EntityAliases, EntityAsked, EntityRead
from app.http.deps import AdminDep, ReadUnitDep, UnitDep
from app.http.params import RobotName
from app.http.routes.memories import BAD_CURSOR
from app.http.routing import ApiRoute
from app.memories.model import ListFilters
from app.memories.schemas import MemoryRead

router = APIRouter(tags=["entities"], route_class=ApiRoute)

EntityPath = Annotated[EntityAsked, Path(description=ENTITY_DESCRIPTION, examples=["Carla"])]
Limit = Annotated[int, Query(ge=1, le=200)]
Cursor = Annotated[Text | None, Query(description="next_cursor of the previous page")]


@router.get(
    "/v1/robots/{robot}/entities",
    operation_id="entities-list",
    summary="The entities the robot's memories name",
    responses={400: BAD_CURSOR},
)
async def list_entities(
    robot: RobotName,
    u: ReadUnitDep,
    kind: Annotated[Kind | None, Query(description="Only entities named so at least once")] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> Page[EntityRead]:
    """The people, names and codes of the current memories the robot may read, with how many
    memories name each, most first; aliases counted as their entity."""
    return await u.entities.list(robot, kind=kind, limit=limit, cursor=cursor)


@router.get(
    "/v1/robots/{robot}/entities/{entity}",
    operation_id="entities-memories",
    summary="Everything about an entity",
    responses={400: BAD_CURSOR},
)
async def entity_memories(
    robot: RobotName, entity: EntityPath, u: ReadUnitDep, limit: Limit = 50, cursor: Cursor = None
) -> Page[MemoryRead]:
    """The current memories naming the entity (or an alias of it) that the robot may read,
    newest first: the memory listing filtered by `entity`."""
    return await u.reader.list(
        robot, "all", ListFilters(), timeframe=None, limit=limit, cursor=cursor, entity=entity
    )


@router.get(
    "/v1/entities/aliases", operation_id="entities-aliases-get", summary="The entity aliases"
)
async def get_aliases(u: UnitDep) -> EntityAliases:
    """The namespace's aliases, alias → entity, by alias."""
    return await u.entities.aliases()


@router.put(
    "/v1/entities/aliases", operation_id="entities-aliases-put", summary="Set the entity aliases"
)
async def put_aliases(_admin: AdminDep, body: EntityAliases, u: UnitDep) -> EntityAliases:
    """Admin only: replaces the namespace's aliases (an empty map: none). They apply to every
    read at once, memories stored before included."""
    return await u.entities.set_aliases(body)
