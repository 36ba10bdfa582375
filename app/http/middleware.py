"""How much of a request's body is read, and for how long: 413 and 408 problem+json.

The body is read by whoever needs it (FastAPI for a route's JSON, the MCP SDK for /mcp),
after the caller is known (app/http/routing.py identifies before the body with auth on), so an
unauthenticated client never gets the server to hold its body. Here, around that reading:

- a declared Content-Length over the limit is answered 413 before anything runs;
- the bytes received are counted (a lying or absent Content-Length cannot get around the
  limit) and the body must arrive within `timeout_s` of the request's start;
- a response that starts before the body was read in full (401, 404, 413, 408...) closes
  the connection: uvicorn would otherwise go on reading, and discarding, what the client
  sends, for as long as it sends it.

A limit or deadline broken while the body is read raises from `receive`, inside whoever
reads it: FastAPI re-raises an HTTPException as is, the MCP SDK turns any error into a 500.
Either way the gate's own answer replaces the response the app then starts, so a body
refused here is answered the same everywhere.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_BASE, PROBLEM_JSON
from app.observability import request_id


@dataclass
class _Body:
    """A request's body as it is read through the gate."""

    receive: Receive
    limit: int
    pending: bool  # some of the body is still to come
    deadline: float  # the event loop's clock
    seen: int = 0
    refused: int | None = None  # 413 or 408, once refused
    answered: bool = False

    async def read(self) -> Message:
        """The app's receive: the body counted (413) within its deadline (408)."""
        if self.refused is not None:  # asked again (it stays refused, as first said)
            raise HTTPException(self.refused)
        if not self.pending:  # after the body: a disconnect, waited for without limit
            return await self.receive()
        try:
            async with asyncio.timeout_at(self.deadline):
                message = await self.receive()
        except TimeoutError:
            self.refused = 408
            raise HTTPException(408) from None
        if message["type"] != "http.request":  # the client left before its body ended
            self.pending = False
            return message
        self.seen += len(message.get("body", b""))
        if self.seen > self.limit:
            self.refused = 413
            raise HTTPException(413)
        self.pending = message.get("more_body", False)
        return message


def _declared(scope: Scope) -> tuple[bytes | None, bool]:
    """The request's Content-Length, and whether it is chunked."""
    length: bytes | None = None
    chunked = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked


class BodyGate:
    def __init__(self, app: ASGIApp, limit: int, timeout_s: float) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length, chunked = _declared(scope)
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._answer(scope, send, 413)
            return
        body = _Body(
            receive,
            self.limit,
            pending=chunked or (length is not None and length.strip(b"0") != b""),
            deadline=asyncio.get_running_loop().time() + self.timeout_s,
        )

        async def send_checked(message: Message) -> None:
            if body.refused is not None:
                # The app's answer to the exception raised above: ours replaces it.
                if message["type"] == "http.response.start" and not body.answered:
                    await self._answer(scope, send, body.refused)
                    body.answered = True
                return
            if message["type"] == "http.response.start" and body.pending:
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            await send(message)

        try:
            await self.app(scope, body.read, send_checked)
        except Exception:
            if body.refused is None:
                raise  # not about the body: ServerErrorMiddleware's 500
        if body.refused is not None and not body.answered:
            await self._answer(scope, send, body.refused)

    async def _answer(self, scope: Scope, send: Send, status: int) -> None:
        if status == 413:
            problem = {
                "type": PROBLEM_BASE + "payload-too-large",
                "title": "Payload too large",
                "status": 413,
                "detail": f"the request body is over {self.limit} bytes",
                "limit": self.limit,
            }
        else:
            problem = {
                "type": PROBLEM_BASE + "request-timeout",
                "title": "Request timeout",
                "status": 408,
                "detail": f"the request body did not arrive within {self.timeout_s:g} s",
                "timeout_s": self.timeout_s,
            }
        problem |= {"instance": scope.get("path", ""), "request_id": request_id.of(scope)}
        content = json.dumps(problem).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(content)).encode()),
                    _CLOSE,
                ],
            }
        )
        await send({"type": "http.response.body", "body": content})


_CLOSE = (b"connection", b"close")
