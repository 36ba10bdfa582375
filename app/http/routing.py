"""The route class every router uses: the caller identified before the body is read, and
JSON bodies parsed by pydantic-core.

FastAPI reads and parses a route's body before it resolves any dependency, `get_caller`
included: with auth on, a client without a key could make the server receive and hold a
body of up to HTM_MAX_BODY_BYTES before hearing 401. A route whose dependencies include
`get_caller` identifies its caller first (app/http/deps.py `identify_first`; the dependency then
reuses that identity), so that body is never read (app/http/middleware.py closes the connection).

JSON is parsed by pydantic-core's parser (jiter), not the standard library's (for a body
carrying embeddings that is a visible share of the request's CPU: bench/README.md, "Figures
behind the code") nor orjson: orjson turns an integer past 64 bits into a float without a
word, and a memory's metadata came back changed. jiter keeps integers of any size exactly,
and the schemas refuse what cannot be kept (app/common.py `JsonObject`). Measured here
against orjson: a 500 x 384-float batch in 12 ms (orjson 16), 250 x 32 KB in 11 ms (19), one
memory with its vector in 13 µs (10). NaN and Infinity are not JSON and are refused here
(400); nesting past the parser's limit (about 200 levels; orjson's was 1024) is the 422 the
schemas give past their 64 (`common.JsonTooDeep`); a number too large for a float (1e400)
parses as infinity, which every float field's bounds and `JsonObject` refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

import fastapi.routing as fastapi_routing
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette._utils import get_route_path
from starlette.routing import Match, Mount, Route
from starlette.types import Scope

from app.common import parse_json
from app.http.deps import get_caller, identify_first


class JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


def resolves(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether FastAPI calls `call` to resolve this route, directly or through another
    dependency (UnitDep, AdminDep)."""
    return any(d.call is call or resolves(d, call) for d in dependant.dependencies)


def is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def sends_body(request: Request) -> bool:
    h = request.headers
    return h.get("content-length", "0") not in ("", "0") or "transfer-encoding" in h


AUTH_IGNORED = "ignored: auth is off (HTM_AUTH_ENABLED), the Authorization header was not checked"


class ApiRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        identifies = resolves(self.dependant, get_caller)
        takes_json = self.body_field is not None

        async def handle(request: Request) -> Response:
            if identifies:
                await identify_first(request)
            # A body is JSON, said so: another type (or none) is a 415, before it is read.
            if takes_json and sends_body(request):
                given = request.headers.get("content-type")
                if given is None or not is_json(given):
                    raise HTTPException(
                        415,
                        f"this route takes application/json, not {given or 'no content type'}",
                    )
            response = await handler(JsonRequest(request.scope, request.receive))
            if "authorization" in request.headers and not _auth_on(request):
                response.headers["X-HTM-Auth"] = AUTH_IGNORED
            return response

        return handle


def _auth_on(request: Request) -> bool:
    components = getattr(request.app.state, "components", None)
    return components is None or bool(components.settings.auth_enabled)


# --- matching: a router none of whose paths fits is passed over in one regex -----------------

_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


class AsgiRoute(Route):
    """A plain route (an ASGI app such as the MCP transport at /mcp, or a page such as /docs)
    that names itself in the scope, as an API route does: FastAPI's router sets
    `scope["route"]` only for its own API routes, and without it the request would be counted
    under route="unmatched" (the label of paths no route fits; app/observability/middleware.py)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


class AsgiMount(Mount):
    """A mount that names itself in the scope (the docs' static files at /docs-assets): its
    requests are labelled `<mount>/{path}` unless a route inside names itself."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def label_plain_routes(app: FastAPI) -> None:
    """The plain Starlette routes and mounts an app holds (FastAPI's /openapi.json; /docs, its
    OAuth2 redirect, /redoc and /docs-assets from app/http/openapi.py) made into ones that name
    themselves, so that /metrics counts them under their own path, not route="unmatched"."""
    routes = app.router.routes
    for i, route in enumerate(routes):
        if type(route) is Route:
            routes[i] = AsgiRoute(
                route.path,
                route.endpoint,
                methods=list(route.methods or ()) or None,
                name=route.name,
                include_in_schema=route.include_in_schema,
            )
        elif type(route) is Mount:
            routes[i] = AsgiMount(route.path, app=route.app, name=route.name)


def skip_unmatched_routers(app: FastAPI) -> None:
    """Each included router answers "no match" from one regex of all its routes' paths when
    none fits the request's path, instead of trying its routes one by one (FastAPI's
    _IncludedRouter: the path regex plus scope bookkeeping per route). A recall's path was
    matched against ~50 routes of the 6 routers before its own, 76 µs of its ~1.5 ms of CPU
    (bench/results/2026-12-07-cpu.md). Only a router whose routes are all API routes is given
    the shortcut, and its answer is the one its routes would give: a path none of them fits
    is Match.NONE (a fitting path with another method, PARTIAL, still goes to the routes).
    Routes are fixed once the app is made (app/main.py); FastAPI versions without included
    routers match as they always did."""
    included = getattr(fastapi_routing, "_IncludedRouter", None)
    if included is None:
        return
    for route in app.router.routes:
        if not isinstance(route, included):
            continue
        patterns = _paths_of(route)
        if patterns is None or not patterns:
            continue
        fits = re.compile("|".join(f"(?:{_NAMED_GROUP.sub('(?:', p)})" for p in patterns))
        route.matches = _prefiltered(route.matches, fits)  # type: ignore[method-assign]


def _paths_of(router: Any) -> list[str] | None:
    """The path regexes of every route an included router holds, or None when one is not an
    API route (a mount, a frontend group) or has none."""
    patterns = []
    for context in router.effective_route_contexts():
        route = getattr(context, "original_route", None)
        regex = getattr(context, "path_regex", None)
        if not isinstance(route, APIRoute) or regex is None:
            return None
        patterns.append(regex.pattern)
    return patterns


def _prefiltered(
    matches: Callable[[Scope], tuple[Match, Scope]], fits: re.Pattern[str]
) -> Callable[[Scope], tuple[Match, Scope]]:
    def prefiltered(scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and fits.match(get_route_path(scope)) is None:
            return Match.NONE, {}
        return matches(scope)

    return prefiltered
