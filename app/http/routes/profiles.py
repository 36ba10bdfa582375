from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.common import NAME_PATTERN
from app.http.deps import UnitDep
from app.http.params import RobotName
from app.http.routing import ApiRoute
from app.profiles.schemas import ProfilePatch, ProfileRead

router = APIRouter(prefix="/v1/robots/{robot}/profiles", tags=["profiles"], route_class=ApiRoute)

Subject = Annotated[
    str, Path(pattern=NAME_PATTERN, description="Who the profile is about", examples=["maria"])
]


@router.get("/{subject}", operation_id="profiles-get", summary="Read a profile")
async def get_profile(robot: RobotName, subject: Subject, u: UnitDep) -> ProfileRead:
    """The subject's slots: each the current memory whose metadata names the subject and the
    slot as its `attribute` (set through this API or not)."""
    return await u.profiles.get(robot, subject)


@router.patch("/{subject}", operation_id="profiles-patch", summary="Set or remove profile slots")
async def patch_profile(
    robot: RobotName, subject: Subject, body: ProfilePatch, u: UnitDep
) -> ProfileRead:
    """Each slot set adds a memory superseding the slot's current one (history and versions
    keep the old values); null forgets the slot's memory (restorable). Answers the profile."""
    return await u.profiles.patch(robot, subject, body)
