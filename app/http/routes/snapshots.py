from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, status

from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.snapshots.schemas import (
    SnapshotCreate,
    SnapshotDetail,
    SnapshotRead,
    SnapshotRestored,
)

router = APIRouter(
    prefix="/v1/robots/{robot}/snapshots", tags=["working-memory"], route_class=ApiRoute
)

SnapshotId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The snapshot's id")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    operation_id="snapshots-create",
    summary="Snapshot working memory",
)
async def create_snapshot(
    robot: RobotName,
    u: UnitDep,
    body: Annotated[
        SnapshotCreate | None, Body(description="Optional", examples=[{"name": "before the trip"}])
    ] = None,
) -> SnapshotRead:
    """Records the robot's working memory as its mirror holds it now (each memory, the version
    held, its order and last access) and the memories it can read now."""
    return await u.snapshots.create(robot, body or SnapshotCreate())


@router.get("", operation_id="snapshots-list", summary="List snapshots")
async def list_snapshots(robot: RobotName, u: UnitDep) -> list[SnapshotRead]:
    """The robot's snapshots, oldest first."""
    return await u.snapshots.list(robot)


@router.get("/{snapshot_id}", operation_id="snapshots-get", summary="Get a snapshot")
async def get_snapshot(robot: RobotName, snapshot_id: SnapshotId, u: UnitDep) -> SnapshotDetail:
    """One of the robot's snapshots with its items, in eviction order."""
    return await u.snapshots.get(robot, snapshot_id)


@router.delete("/{snapshot_id}", operation_id="snapshots-delete", summary="Delete a snapshot")
async def delete_snapshot(robot: RobotName, snapshot_id: SnapshotId, u: UnitDep) -> SnapshotRead:
    """Deletes one of the robot's snapshots; working memory is untouched."""
    return await u.snapshots.delete(robot, snapshot_id)


@router.post(
    "/{snapshot_id}/restore", operation_id="snapshots-restore", summary="Restore a snapshot"
)
async def restore_snapshot(
    robot: RobotName, snapshot_id: SnapshotId, u: UnitDep
) -> SnapshotRestored:
    """Working memory becomes the snapshot's, through the write protocol: memories forgotten
    or superseded since are skipped (`skipped`), the budget still applies (`evicted`)."""
    return await u.snapshots.restore(robot, snapshot_id)
