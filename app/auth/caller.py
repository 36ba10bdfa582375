"""Who is calling: the namespace every request is scoped to, and what the caller may do.

Auth on: `Authorization: Bearer <key>`; the key names the namespace and the role. Reads (GET)
need `reader`, changes (POST/PUT/DELETE) need `writer`, key management needs `admin`.
Auth off (the embedded default): the optional X-Namespace header names the namespace
(default `default`) and the caller may do everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, Header, Request

from app.common import NAME_PATTERN
from app.deps import ResourcesDep
from app.errors import Forbidden, Unauthorized, Unprocessable
from app.namespaces.repository import NamespaceRepository

Role = Literal["admin", "writer", "reader"]
RANK = {"reader": 0, "writer": 1, "admin": 2}
READ_METHODS = {"GET", "HEAD", "OPTIONS"}
_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Caller:
    namespace_id: int
    namespace: str
    role: Role


async def _identify(request: Request, res: ResourcesDep, x_namespace: str | None) -> Caller:
    if not res.settings.auth_enabled:
        name = x_namespace or "default"
        if not _NAME.fullmatch(name):
            raise Unprocessable(
                "X-Namespace must match [A-Za-z0-9._-]{1,64}",
                errors=[{"field": "header.X-Namespace", "message": "invalid namespace name"}],
            )
        ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, name)
        return Caller(namespace_id=ns_id, namespace=name, role="admin")

    from app.auth.service import authenticate

    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send an API key as `Authorization: Bearer <key>`")
    found = await authenticate(res.sessionmaker, res.key_cache, token.strip())
    if found is None:
        raise Unauthorized("the API key is unknown or revoked")
    ns_id, ns_name, role, _ = found
    return Caller(namespace_id=ns_id, namespace=ns_name, role=role)  # type: ignore[arg-type]


def _require(caller: Caller, needed: Role) -> Caller:
    if RANK[caller.role] < RANK[needed]:
        raise Forbidden(
            f"this needs the {needed} role; the key has {caller.role}",
            role=caller.role,
            required=needed,
        )
    return caller


async def get_caller(
    request: Request,
    res: ResourcesDep,
    x_namespace: Annotated[
        str | None,
        Header(description="Namespace to act in when auth is off (default: `default`)"),
    ] = None,
) -> Caller:
    caller = await _identify(request, res, x_namespace)
    return _require(caller, "reader" if request.method in READ_METHODS else "writer")


async def get_admin(caller: Annotated[Caller, Depends(get_caller)]) -> Caller:
    return _require(caller, "admin")


CallerDep = Annotated[Caller, Depends(get_caller)]
AdminDep = Annotated[Caller, Depends(get_admin)]
