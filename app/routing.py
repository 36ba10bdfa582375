"""The route class every router uses: request bodies parsed by orjson.

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
from fastapi.routing import APIRoute


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class OrjsonRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(OrjsonRequest(request.scope, request.receive))

        return handle
