from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from app.auth.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyRead
from app.common import INT64_MAX
from app.http.deps import AdminDep, UnitDep
from app.http.routing import ApiRoute

router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=ApiRoute)


@router.post(
    "", status_code=status.HTTP_201_CREATED, operation_id="keys-create", summary="Create an API key"
)
async def create_key(body: ApiKeyCreate, caller: AdminDep, u: UnitDep) -> ApiKeyCreated:
    """Creates a key in the caller's namespace; the secret is in this response only."""
    return await u.keys.create(caller.namespace, body)


@router.get("", operation_id="keys-list", summary="List API keys")
async def list_keys(_: AdminDep, u: UnitDep) -> list[ApiKeyRead]:
    """The namespace's keys (never their secrets), revoked ones included."""
    return await u.keys.list()


@router.delete("/{key_id}", operation_id="keys-revoke", summary="Revoke an API key")
async def revoke_key(
    key_id: Annotated[int, Path(ge=1, le=INT64_MAX)], _: AdminDep, u: UnitDep
) -> ApiKeyRead:
    """Revokes the key at once; requests with it then get 401."""
    return await u.keys.revoke(key_id)
