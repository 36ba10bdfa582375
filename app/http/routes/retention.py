from __future__ import annotations

from fastapi import APIRouter

from app.http.deps import AdminDep, UnitDep
from app.http.routing import ApiRoute
from app.retention.schemas import RetentionPolicies, RetentionRun, RetentionRunRequest

router = APIRouter(prefix="/v1/retention", tags=["retention"], route_class=ApiRoute)


@router.get("", operation_id="retention-get", summary="The namespace's retention policies")
async def get_policies(_admin: AdminDep, u: UnitDep) -> RetentionPolicies:
    """Admin only: the policies `POST /v1/retention/run` and the retention worker apply."""
    return await u.retention.policies()


@router.put("", operation_id="retention-put", summary="Set the namespace's retention policies")
async def put_policies(_admin: AdminDep, body: RetentionPolicies, u: UnitDep) -> RetentionPolicies:
    """Admin only: replaces them all (an empty list: none). A policy archives (a soft delete
    naming its rule), never deletes."""
    return await u.retention.set_policies(body)


@router.post("/run", operation_id="retention-run", summary="Apply the retention policies now")
async def run_policies(_admin: AdminDep, body: RetentionRunRequest, u: UnitDep) -> RetentionRun:
    """Admin only: archives what each policy names (`dry_run`: lists it, archives nothing),
    at most 1,000 memories per policy a run. Archived memories leave recall, context and
    working memory; `POST …/memories/{key}/restore` brings one back."""
    return await u.retention.run(body.dry_run)
