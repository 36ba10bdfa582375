"""Request body size limit, enforced before any work is done (413 problem+json)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_BASE, PROBLEM_JSON
from app.observability import request_id


class BodyLimitMiddleware:
    """Rejects bodies over `limit` bytes: by Content-Length up front, and by counting when the
    client streams without one (so a lying or absent header cannot get around the limit).

    The body is read here, up to the limit, before the app sees the request: raising from a
    wrapped `receive` instead would surface inside FastAPI's body parsing, which turns any
    error there into a 400. Routes read the whole body anyway, so buffering costs nothing."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._reject(scope, send)
            return

        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._reject(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break

        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:  # after the body: disconnects, for routes that wait for one
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, scope: Scope, send: Send) -> None:
        body = json.dumps(
            {
                "type": PROBLEM_BASE + "payload-too-large",
                "title": "Payload too large",
                "status": 413,
                "detail": f"the request body is over {self.limit} bytes",
                "instance": scope.get("path", ""),
                "limit": self.limit,
                "request_id": request_id.of(scope),
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
