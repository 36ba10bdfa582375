from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response, status

from app.common import (
    INSTANT_RANGE,
    NAME_PATTERN,
    TYPE_PATTERN,
    Instant,
    Page,
    Phrase,
    Source,
    Tag,
    Text,
)
from app.entities.schemas import EntityAsked
from app.errors import PROBLEM_JSON
from app.http.deps import ReadUnitDep, UnitDep
from app.http.params import MemoryKeyPath, RobotName, TimeframeQuery
from app.http.routing import ApiRoute
from app.memories.repository import ListFilters
from app.memories.schemas import (
    FeedbackAccepted,
    ImportanceChange,
    MemoryAdded,
    MemoryBatchCreate,
    MemoryBatchResult,
    MemoryCreate,
    MemoryFeedback,
    MemoryHistory,
    MemoryRead,
    MemoryUpsert,
    MemoryVersions,
)
from app.timeframes.validity import INCLUDE_DESCRIPTION, VALID_AT_DESCRIPTION, Include

router = APIRouter(prefix="/v1/robots/{robot}/memories", tags=["memories"], route_class=ApiRoute)

# GETs have no 400 in app/http/openapi.py's error set; this one has, for a cursor it did not issue.
BAD_CURSOR: dict[str, Any] = {
    "description": "A `cursor` this service did not issue",
    "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


VERSION_MAX = 2**31 - 1  # memory.version is an integer column


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
    robot: RobotName, body: MemoryCreate, u: UnitDep, response: Response
) -> MemoryAdded:
    """Stores the memory durably, then places it in the robot's working memory. With
    `dedupe`, a duplicate of a live memory stores nothing and reinforces that memory."""
    added = await u.memories.add(robot, body)
    if added.duplicate_of is not None:
        response.status_code = status.HTTP_200_OK
    return added


@router.post(
    "/batch",
    status_code=status.HTTP_201_CREATED,
    operation_id="memories-add-batch",
    summary="Add many memories (all or nothing)",
)
async def add_memories(robot: RobotName, body: MemoryBatchCreate, u: UnitDep) -> MemoryBatchResult:
    """Stores every memory in one transaction, or none of them; then places them in the
    author's working memory, unless `working_memory` is false."""
    return MemoryBatchResult(
        memories=await u.memories.add_many(robot, body.memories, place=body.working_memory)
    )


@router.get(
    "",
    operation_id="memories-list",
    summary="List memories",
    responses={400: BAD_CURSOR},
)
async def list_memories(
    robot: RobotName,
    u: ReadUnitDep,
    scope: Annotated[
        Literal["self", "all"],
        Query(description="self: memories this robot authored; all: the namespace's"),
    ] = "all",
    *,
    type: Annotated[str | None, Query(pattern=TYPE_PATTERN, description="Only this type")] = None,
    tag: Annotated[
        list[Tag] | None,
        Query(description="Any of these tags or their descendants (repeatable)"),
    ] = None,
    min_importance: Annotated[float | None, Query(ge=0, le=10)] = None,
    min_confidence: Annotated[
        float | None,
        Query(
            ge=0, le=1, description="Only memories at least this confident (none said: left out)"
        ),
    ] = None,
    source: Annotated[
        list[Source] | None, Query(description="Only memories of any of these sources (repeatable)")
    ] = None,
    timeframe: TimeframeQuery = None,
    include_deleted: Annotated[bool, Query(description="Include soft-deleted memories")] = False,
    valid_at: Annotated[Phrase | None, Query(description=VALID_AT_DESCRIPTION)] = None,
    include: Annotated[list[Include] | None, Query(description=INCLUDE_DESCRIPTION)] = None,
    as_of: Annotated[
        Instant | None,
        Query(
            description="Transaction time: each memory as its version current at this "
            "instant (what was believed then); the other filters apply to that version",
            examples=["2026-03-01T00:00:00Z"],
        ),
    ] = None,
    pool: Annotated[
        str | None,
        Query(pattern=NAME_PATTERN, description="Only this pool's memories (that the robot reads)"),
    ] = None,
    entity: Annotated[
        EntityAsked | None,
        Query(
            description="Only the memories naming this entity or an alias of it (any case; "
            "not with `as_of`)",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[Text | None, Query(description="next_cursor of the previous page")] = None,
) -> Page[MemoryRead]:
    """Newest first, with filters and cursor pagination: the current memories unless
    `valid_at` or `include=superseded` says otherwise; only what the robot may read (its own,
    its group's, namespace-wide ones and those of the pools it reads)."""
    filters = ListFilters(
        pool=pool,
        type=type,
        tags_any=tag,
        min_importance=min_importance,
        min_confidence=min_confidence,
        sources=source,
        include_deleted=include_deleted,
        as_of=as_of,
    )
    return await u.reader.list(
        robot,
        scope,
        filters,
        timeframe=timeframe,
        limit=limit,
        cursor=cursor,
        valid_at=valid_at,
        include=include or [],
        entity=entity,
    )


@router.get("/{key}", operation_id="memories-get", summary="Retrieve a memory")
async def get_memory(
    robot: RobotName,
    key: MemoryKeyPath,
    u: ReadUnitDep,
    *,
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
    return await u.reader.retrieve(robot, key, include_deleted, as_of)


@router.get("/{key}/history", operation_id="memories-history", summary="A memory's supersede chain")
async def supersede_history(
    robot: RobotName,
    key: MemoryKeyPath,
    u: UnitDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Links each way, at most")] = 20,
) -> MemoryHistory:
    """What the memory superseded and what superseded it, oldest first (its versions, the
    same memory's changes over time, are `/versions`)."""
    return await u.reader.chain(robot, key, limit)


@router.get("/{key}/versions", operation_id="memories-versions", summary="List a memory's versions")
async def list_versions(
    robot: RobotName,
    key: MemoryKeyPath,
    u: UnitDep,
    *,
    include_deleted: IncludeDeleted = False,
    before: Annotated[
        int | None, Query(ge=1, le=VERSION_MAX, description="Only versions older than this one")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> MemoryVersions:
    """Newest first, the current version included, each with who wrote it and when."""
    return await u.reader.versions(robot, key, include_deleted, limit=limit, before=before)


@router.post(
    "/{key}/versions/{version}/restore",
    operation_id="memories-version-restore",
    summary="Make an earlier version current again",
)
async def restore_version(
    robot: RobotName,
    key: MemoryKeyPath,
    version: Annotated[int, Path(ge=1, le=VERSION_MAX, description="The version to restore")],
    u: UnitDep,
) -> MemoryAdded:
    """Replaces the memory with the version's fields, as a new version (like a PUT)."""
    return await u.versions.restore(robot, key, version)


@router.put(
    "/{key}",
    operation_id="memories-put",
    summary="Create or replace a memory (idempotent)",
    responses={201: {"model": MemoryAdded, "description": "Created"}},
)
async def put_memory(
    robot: RobotName, key: MemoryKeyPath, body: MemoryUpsert, *, u: UnitDep, response: Response
) -> MemoryAdded:
    """Creates the key (201) or replaces its fields (200); repeating a PUT changes nothing more."""
    result = await u.memories.upsert(robot, key, body)
    response.status_code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
    return result


@router.patch(
    "/{key}",
    operation_id="memories-importance",
    summary="Boost or reduce a memory's importance, set its confidence or source",
)
async def patch_importance(
    robot: RobotName, key: MemoryKeyPath, body: ImportanceChange, u: UnitDep
) -> MemoryAdded:
    """Sets `importance`, or adds `boost` to it (within 0–10), and sets `confidence` or
    `source` when given, as a new version (a change of nothing writes none)."""
    return await u.memories.adjust_importance(robot, key, body)


@router.post(
    "/{key}/feedback",
    operation_id="memories-feedback",
    summary="Say whether a memory was of use",
    status_code=202,
)
async def memory_feedback(
    robot: RobotName, key: MemoryKeyPath, body: MemoryFeedback, u: UnitDep
) -> FeedbackAccepted:
    """Moves the memory's learned importance a step toward 10 (`used: true`) or 0 (`false`),
    written within about a second (app/memories/learning.py); its `importance` is kept."""
    return await u.reader.feedback(robot, key, body)


@router.delete("/{key}", operation_id="memories-forget", summary="Forget a memory")
async def forget_memory(
    robot: RobotName,
    key: MemoryKeyPath,
    u: UnitDep,
    *,
    hard: Annotated[bool, Query(description="Delete permanently (needs `confirm`)")] = False,
    confirm: Annotated[
        Text | None, Query(description="For a hard delete: the memory's key, repeated")
    ] = None,
) -> MemoryRead:
    """Soft delete (restorable) by default; `hard=true&confirm=<key>` deletes permanently."""
    return await u.memories.forget(robot, key, hard, confirm)


@router.post("/{key}/restore", operation_id="memories-restore", summary="Restore a memory")
async def restore_memory(robot: RobotName, key: MemoryKeyPath, u: UnitDep) -> MemoryRead:
    """Undoes a soft delete."""
    return await u.memories.restore(robot, key)
