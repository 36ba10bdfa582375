"""The route class every router uses: the caller identified before the body is read, and
request bodies parsed by orjson.

FastAPI reads and parses a route's body before it resolves any dependency, `get_caller`
included: with auth on, a client without a key could make the server receive and hold a
body of up to HTM_MAX_BODY_BYTES before hearing 401. A route whose dependencies include
`get_caller` identifies its caller first (app/deps.py `identify_first`; the dependency then
reuses that identity), so that body is never read (app/middleware.py closes the connection).

FastAPI parses JSON bodies with the standard library's json module before pydantic validates
them; for a body carrying a 384-float embedding that is a visible share of the request's CPU
(bench/README.md, "Figures behind the code"). orjson's JSONDecodeError subclasses
json.JSONDecodeError, so malformed bodies still become FastAPI's `json_invalid` error (400
problem+json, see app/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.deps import get_caller, identify_first


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


def resolves(dependant: Dependant, call: Callable[..., Any]) -> bool:
    """Whether FastAPI calls `call` to resolve this route, directly or through another
    dependency (ScopeDep, AdminDep)."""
    return any(d.call is call or resolves(d, call) for d in dependant.dependencies)


class OrjsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        identifies = resolves(self.dependant, get_caller)

        async def handle(request: Request) -> Response:
            if identifies:
                await identify_first(request)
            return await handler(OrjsonRequest(request.scope, request.receive))

        return handle
