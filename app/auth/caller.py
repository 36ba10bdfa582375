"""Who is calling: the namespace every request is scoped to, and what the caller may do.

Auth on: `Authorization: Bearer <key>`; the key names the namespace and the role. Reads (GET)
need `reader`, changes (POST/PUT/DELETE) need `writer`, key management needs `admin`.
Auth off (the embedded default): the optional X-Namespace header names the namespace
(default `default`) and the caller may do everything. app/http/deps.py wires this into requests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app import names
from app.auth.schemas import Role
from app.auth.service import KeyCache, authenticate
from app.cache import TtlCache
from app.db.session import Sessionmaker
from app.errors import Forbidden, Unauthorized
from app.namespaces.repository import NamespaceRepository

log = logging.getLogger(__name__)
RANK = {"reader": 0, "writer": 1, "admin": 2}


@dataclass(frozen=True)
class Caller:
    namespace_id: int
    namespace: str
    role: Role
    robot: str | None = None  # a key bound to a robot acts only as it (`acts_as`)


async def identify(
    authorization: str,
    x_namespace: str | None,
    *,
    auth_enabled: bool,
    sessionmaker: Sessionmaker,
    namespace_ids: TtlCache[str, int],
    key_cache: KeyCache,
) -> Caller:
    """The caller named by the request's key (auth on) or X-Namespace header (auth off)."""
    if not auth_enabled:
        name = names.check("namespace", x_namespace or "default", "header.X-Namespace")
        ns_id = await NamespaceRepository.resolve(sessionmaker, namespace_ids, name)
        return Caller(namespace_id=ns_id, namespace=name, role="admin")

    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send an API key as `Authorization: Bearer <key>`")
    found = await authenticate(sessionmaker, key_cache, token.strip())
    if found is None:
        raise Unauthorized("the API key is unknown or revoked")
    ns_id, ns_name, role, _, robot = found
    return Caller(namespace_id=ns_id, namespace=ns_name, role=role, robot=robot)  # type: ignore[arg-type]


def require_role(caller: Caller, needed: Role) -> Caller:
    if RANK[caller.role] < RANK[needed]:
        raise Forbidden(
            f"this needs the {needed} role; the key has {caller.role}",
            role=caller.role,
            required=needed,
        )
    return caller


def acts_as(caller: Caller, robot: str | None) -> None:
    """A key bound to a robot acts as that robot alone: naming another is a 403, so the
    holder of one robot's key never reads another's private memories."""
    if caller.robot is not None and robot is not None and robot != caller.robot:
        raise Forbidden(
            f"this key acts only as robot {caller.robot!r}, not {robot!r}",
            robot=caller.robot,
        )


def may_change_groups(caller: Caller) -> None:
    """Group membership decides who reads group memories: a robot's key does not change it."""
    if caller.robot is not None:
        raise Forbidden(
            "a key bound to a robot cannot change groups; use a key of the namespace",
            robot=caller.robot,
        )


def rechecker(
    authorization: str, *, auth_enabled: bool, sessionmaker: Sessionmaker, key_cache: KeyCache
) -> Callable[[], Awaitable[bool]]:
    """For a response that outlives its request (the change stream): whether the key that
    opened it is still valid, asked through the same cache as every request, so a revocation
    ends it within the cache's bound. Fails closed: a lookup that cannot be made (PostgreSQL
    down) ends the stream too; the client's reconnect is then answered as any request is."""
    token = authorization.partition(" ")[2].strip()

    async def allowed() -> bool:
        if not auth_enabled:
            return True
        try:
            return await authenticate(sessionmaker, key_cache, token) is not None
        except Exception as exc:
            log.warning("an open stream's key could not be checked: %s", exc)
            return False

    return allowed
