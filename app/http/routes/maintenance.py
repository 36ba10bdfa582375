from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.http.deps import AdminDep, UnitDep
from app.http.routing import ApiRoute
from app.maintenance.schemas import MaintenanceRunRead, MaintenanceRuns, MaintenanceSchedule

router = APIRouter(prefix="/v1/maintenance", tags=["maintenance"], route_class=ApiRoute)


@router.get("", operation_id="maintenance-get", summary="The namespace's maintenance schedule")
async def get_schedule(_admin: AdminDep, u: UnitDep) -> MaintenanceSchedule:
    """Admin only: when maintenance runs start and what they do."""
    return await u.maintenance.schedule()


@router.put("", operation_id="maintenance-put", summary="Set the namespace's maintenance schedule")
async def put_schedule(
    _admin: AdminDep, body: MaintenanceSchedule, u: UnitDep
) -> MaintenanceSchedule:
    """Admin only: a cron schedule (UTC) and the steps; `schedule: null` runs only on request."""
    return await u.maintenance.set_schedule(body)


@router.post("/run", operation_id="maintenance-run", summary="Run maintenance now")
async def run_maintenance(_admin: AdminDep, u: UnitDep) -> MaintenanceRunRead:
    """Admin only: finishes the namespace's unfinished run, or starts one, and answers when
    it ends (each step as the worker runs it; a namespace's first runs can take minutes)."""
    return await u.maintenance.run()


@router.get("/runs", operation_id="maintenance-runs", summary="The namespace's maintenance runs")
async def list_runs(
    _admin: AdminDep, u: UnitDep, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> MaintenanceRuns:
    """Admin only: newest first, each step's outcome as recorded when it finished."""
    return await u.maintenance.runs(limit)
