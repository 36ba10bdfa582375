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
memory with its vector in 13 µs (10). NaN and Infinity are not JSON and are refused here, as
is nesting past 200 levels (orjson's limit was 1024; the schemas allow 64); a number too
large for a float (1e400) parses as infinity, which every float field's bounds and
`JsonObject` refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

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


class ApiRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        identifies = resolves(self.dependant, get_caller)

        async def handle(request: Request) -> Response:
            if identifies:
                await identify_first(request)
            return await handler(JsonRequest(request.scope, request.receive))

        return handle
