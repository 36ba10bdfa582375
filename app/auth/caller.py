"""Who is calling: the namespace every request is scoped to, and the caller's role.

With auth off, the optional X-Namespace header names the namespace (default `default`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, Header

from app.common import NAME_PATTERN
from app.deps import ResourcesDep
from app.errors import Unprocessable
from app.namespaces.repository import NamespaceRepository

Role = Literal["admin", "writer", "reader"]


@dataclass(frozen=True)
class Caller:
    namespace_id: int
    namespace: str
    role: Role


async def get_caller(
    res: ResourcesDep,
    x_namespace: Annotated[
        str | None,
        Header(description="Namespace to act in when auth is off (default: `default`)"),
    ] = None,
) -> Caller:
    name = x_namespace or "default"
    if not re.fullmatch(NAME_PATTERN, name):
        raise Unprocessable(
            "X-Namespace must match [A-Za-z0-9._-]{1,64}",
            errors=[{"field": "header.X-Namespace", "message": "invalid namespace name"}],
        )
    ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, name)
    return Caller(namespace_id=ns_id, namespace=name, role="admin")


CallerDep = Annotated[Caller, Depends(get_caller)]
