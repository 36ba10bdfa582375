from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Response, status

from app.common import (
    INSTANT_RANGE,
    TYPE_PATTERN,
    Instant,
    MemoryKeyPath,
    Page,
    RobotName,
    Tag,
    Text,
)
from app.deps import ScopeDep
from app.errors import PROBLEM_JSON
from app.memories.reads import MemoryReader
from app.memories.repository import ListFilters
from app.memories.schemas import (
    ImportanceChange,
    MemoryAdded,
    MemoryBatchCreate,
    MemoryBatchResult,
    MemoryCreate,
    MemoryRead,
    MemoryUpsert,
    MemoryVersions,
)
from app.memories.service import MemoryService
from app.memories.versions import VersionService
from app.routing import OrjsonRoute
from app.timeframes.http import TimeframeQuery

router = APIRouter(prefix="/v1/robots/{robot}/memories", tags=["memories"], route_class=OrjsonRoute)

# GETs have no 400 in app/openapi.py's error set; this one has, for a cursor it did not issue.
BAD_CURSOR: dict[str, Any] = {
    "description": "A `cursor` this service did not issue",
    "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


async def memory_service(r: ScopeDep) -> MemoryService:
    c = r.components
    return MemoryService(
        r.session,
        r.caller,
        r.robots,
        r.two_tier,
        c.embedder,
        c.tokenizer,
        c.settings,
        c.clock,
        c.group_commit,
        c.vectors,
        c.search_caches,
    )


Service = Annotated[MemoryService, Depends(memory_service)]

VERSION_MAX = 2**31 - 1  # memory.version is an integer column


async def memory_reader(r: ScopeDep) -> MemoryReader:
    c = r.components
    return MemoryReader(r.session, r.caller, r.robots, r.two_tier, c.clock, c.access)


Reader = Annotated[MemoryReader, Depends(memory_reader)]


async def version_service(r: ScopeDep, memories: Service) -> VersionService:
    return VersionService(r.session, r.caller, memories)


Versions = Annotated[VersionService, Depends(version_service)]
IncludeDeleted = Annotated[bool, Query(description="Also a soft-deleted memory")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    operation_id="memories-add",
    summary="Add a memory",
    responses={
        200: {
            "description": "A duplicate (`dedupe`): nothing new was stored; the memory it "
            "duplicates, reinforced, named in `duplicate_of`",
            "model": MemoryAdded,
        }
    },
)
async def add_memory(
    robot: RobotName, body: MemoryCreate, service: Service, response: Response
) -> MemoryAdded:
    """Stores the memory durably, then places it in the robot's working memory. With
    `dedupe`, a duplicate of a live memory stores nothing and reinforces that memory."""
    added = await service.add(robot, body)
    if added.duplicate_of is not None:
        response.status_code = status.HTTP_200_OK
    return added


@router.post(
    "/batch",
    status_code=status.HTTP_201_CREATED,
    operation_id="memories-add-batch",
    summary="Add many memories (all or nothing)",
)
async def add_memories(
    robot: RobotName, body: MemoryBatchCreate, service: Service
) -> MemoryBatchResult:
    """Stores every memory in one transaction, or none of them; then places them in the
    author's working memory, unless `working_memory` is false."""
    return MemoryBatchResult(
        memories=await service.add_many(robot, body.memories, place=body.working_memory)
    )


@router.get(
    "",
    operation_id="memories-list",
    summary="List memories",
    responses={400: BAD_CURSOR},
)
async def list_memories(
    robot: RobotName,
    service: Reader,
    scope: Annotated[
        Literal["self", "all"],
        Query(description="self: memories this robot authored; all: the namespace's"),
    ] = "all",
    type: Annotated[str | None, Query(pattern=TYPE_PATTERN, description="Only this type")] = None,
    tag: Annotated[
        list[Tag] | None,
        Query(description="Any of these tags or their descendants (repeatable)"),
    ] = None,
    min_importance: Annotated[float | None, Query(ge=0, le=10)] = None,
    timeframe: TimeframeQuery = None,
    include_deleted: Annotated[bool, Query(description="Include soft-deleted memories")] = False,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[Text | None, Query(description="next_cursor of the previous page")] = None,
) -> Page[MemoryRead]:
    """Newest first, with filters and cursor pagination."""
    filters = ListFilters(
        type=type, tags_any=tag, min_importance=min_importance, include_deleted=include_deleted
    )
    return await service.list(robot, scope, filters, timeframe, limit, cursor)


@router.get("/{key}", operation_id="memories-get", summary="Retrieve a memory")
async def get_memory(
    robot: RobotName,
    key: MemoryKeyPath,
    service: Reader,
    include_deleted: IncludeDeleted = False,
    as_of: Annotated[
        Instant | None,
        Query(
            description="The version current at this instant (no access is recorded); "
            f"from {INSTANT_RANGE}",
            examples=["2026-11-24T10:00:00Z"],
        ),
    ] = None,
) -> MemoryRead:
    """Returns the memory and records the access in the robot's working memory."""
    return await service.retrieve(robot, key, include_deleted, as_of)


@router.get("/{key}/versions", operation_id="memories-versions", summary="List a memory's versions")
async def list_versions(
    robot: RobotName,
    key: MemoryKeyPath,
    service: Reader,
    include_deleted: IncludeDeleted = False,
    before: Annotated[
        int | None, Query(ge=1, le=VERSION_MAX, description="Only versions older than this one")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> MemoryVersions:
    """Newest first, the current version included, each with who wrote it and when."""
    return await service.versions(key, include_deleted, limit, before)


@router.post(
    "/{key}/versions/{version}/restore",
    operation_id="memories-version-restore",
    summary="Make an earlier version current again",
)
async def restore_version(
    robot: RobotName,
    key: MemoryKeyPath,
    version: Annotated[int, Path(ge=1, le=VERSION_MAX, description="The version to restore")],
    service: Versions,
) -> MemoryAdded:
    """Replaces the memory with the version's fields, as a new version (like a PUT)."""
    return await service.restore(robot, key, version)


@router.put(
    "/{key}",
    operation_id="memories-put",
    summary="Create or replace a memory (idempotent)",
    responses={201: {"model": MemoryAdded, "description": "Created"}},
)
async def put_memory(
    robot: RobotName, key: MemoryKeyPath, body: MemoryUpsert, service: Service, response: Response
) -> MemoryAdded:
    """Creates the key (201) or replaces its fields (200); repeating a PUT changes nothing more."""
    result = await service.upsert(robot, key, body)
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return result


@router.patch(
    "/{key}", operation_id="memories-importance", summary="Boost or reduce a memory's importance"
)
async def patch_importance(
    robot: RobotName, key: MemoryKeyPath, body: ImportanceChange, service: Service
) -> MemoryAdded:
    """Sets `importance`, or adds `boost` to it (within 0–10), as a new version."""
    return await service.adjust_importance(robot, key, body)


@router.delete("/{key}", operation_id="memories-forget", summary="Forget a memory")
async def forget_memory(
    robot: RobotName,
    key: MemoryKeyPath,
    service: Service,
    hard: Annotated[bool, Query(description="Delete permanently (needs `confirm`)")] = False,
    confirm: Annotated[
        Text | None, Query(description="For a hard delete: the memory's key, repeated")
    ] = None,
) -> MemoryRead:
    """Soft delete (restorable) by default; `hard=true&confirm=<key>` deletes permanently."""
    return await service.forget(robot, key, hard, confirm)


@router.post("/{key}/restore", operation_id="memories-restore", summary="Restore a memory")
async def restore_memory(robot: RobotName, key: MemoryKeyPath, service: Service) -> MemoryRead:
    """Undoes a soft delete."""
    return await service.restore(robot, key)
