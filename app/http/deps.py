"""What a request can be given, as FastAPI dependencies: the app's lifetime components (kept
on app.state by the lifespan), the caller (identified once per request, before its body is
read when auth is on: app/http/routing.py) and the request's unit of work (app/unit.py),
which builds the services a route calls.

Every dependency is an `async def`: FastAPI runs a plain `def` (or a class) in a worker
thread, a hand-off that costs more than what these do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from pydantic import BeforeValidator, StringConstraints

from app.auth.caller import Caller, acts_as, identify, may_change_groups, require_role
from app.common import NAME_PATTERN
from app.components import Components
from app.db.replicas import LSN_PATTERN, ReadFrom, parse_lsn
from app.http.consistency import CONSISTENCY_TOKEN, TOKEN_STATE
from app.unit import UnitOfWork, unit_of_work


async def get_components(request: Request) -> Components:
    return request.app.state.components  # type: ignore[no-any-return]


ComponentsDep = Annotated[Components, Depends(get_components)]


# An optional header's value matches its pattern or is empty, which is one not sent (what
# generated clients and proxies send for an unset value); the spec says both.


def _or_empty(pattern: str) -> str:
    return f"^(?:{pattern.strip('^$')})?$"


def _absent_if_empty(value: object) -> object:
    return None if value == "" else value


NamespaceHeader = Annotated[
    Annotated[str, StringConstraints(pattern=_or_empty(NAME_PATTERN))] | None,
    BeforeValidator(_absent_if_empty),
]
TokenHeader = Annotated[
    Annotated[str, StringConstraints(pattern=_or_empty(LSN_PATTERN))] | None,
    BeforeValidator(_absent_if_empty),
]


async def get_caller(
    request: Request,
    c: ComponentsDep,
    x_namespace: Annotated[
        NamespaceHeader,
        Header(description="Namespace to act in when auth is off (default: `default`)"),
    ] = None,
) -> Caller:
    """Who calls, and whether the method is allowed to them (app/auth/caller.py)."""
    return await _caller(request, c, x_namespace)


async def identify_first(request: Request) -> None:
    """With auth on, identify the caller before the route reads its body (app/http/routing.py):
    401 or 403 without holding a body the client was never allowed to send."""
    c: Components = request.app.state.components
    if c.settings.auth_enabled:
        await _caller(request, c, request.headers.get("x-namespace"))


async def _caller(request: Request, c: Components, x_namespace: str | None) -> Caller:
    # Identified once per request: kept in the scope's state by whichever asks first.
    state = request.scope.setdefault("state", {})
    caller = state.get("caller")
    if caller is None:
        caller = await identify(
            request.headers.get("authorization", ""),
            x_namespace,
            auth_enabled=c.settings.auth_enabled,
            sessionmaker=c.sessionmaker,
            namespace_ids=c.namespace_ids,
            key_cache=c.key_cache,
        )
        state["caller"] = caller
        state["namespace"] = caller.namespace  # for the request's log line
    require_role(caller, "reader" if request.method in READ_METHODS else "writer")
    if caller.robot is not None:  # a key bound to a robot: only as that robot
        acts_as(caller, request.path_params.get("robot") or request.query_params.get("robot"))
        if request.url.path.startswith("/v1/groups") and request.method not in READ_METHODS:
            may_change_groups(caller)
    return caller


READ_METHODS = {"GET", "HEAD", "OPTIONS"}
CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_admin(caller: CallerDep) -> Caller:
    return require_role(caller, "admin")


AdminDep = Annotated[Caller, Depends(get_admin)]


async def get_writer(caller: CallerDep) -> Caller:
    """For a GET that writes (a session window's read refreshes the session)."""
    return require_role(caller, "writer")


WriterDep = Annotated[Caller, Depends(get_writer)]


async def get_unit(
    request: Request, caller: CallerDep, c: ComponentsDep
) -> AsyncIterator[UnitOfWork]:
    """The request's unit of work (app/unit.py): its session commits on success and rolls
    back on any error. With replicas, a write's response carries its consistency token
    (app/http/consistency.py)."""
    async with unit_of_work(c, caller) as unit:
        yield unit
    if c.replicas is not None and request.method not in READ_METHODS:
        request.scope.setdefault("state", {})[TOKEN_STATE] = await c.replicas.token()


# scope="function": the commit happens before the response is sent, so a client never gets
# a 2xx for a change that then fails to commit (FastAPI's default runs it afterwards).
UnitDep = Annotated[UnitOfWork, Depends(get_unit, scope="function")]


async def get_read_unit(
    caller: CallerDep,
    c: ComponentsDep,
    token: Annotated[
        TokenHeader,
        Header(
            alias=CONSISTENCY_TOKEN,
            description="A write's consistency token (its response's `HTM-Consistency-Token`): "
            "the read sees that write, from a read replica that has replayed it or else from "
            "the primary (docs/api.md, read replicas)",
            examples=["0/1A2B3C4"],
        ),
    ] = None,
) -> AsyncIterator[UnitOfWork]:
    """A unit of work whose reads may run on a read replica (app/db/replicas.py)."""
    read_from = ReadFrom(None if token is None else parse_lsn(token))
    async with unit_of_work(c, caller, read_from) as unit:
        yield unit


ReadUnitDep = Annotated[UnitOfWork, Depends(get_read_unit, scope="function")]
