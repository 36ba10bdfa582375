"""Consistency tokens (read replicas, app/db/replicas.py): a write's response carries the
primary's WAL position after its commit in `HTM-Consistency-Token`; a read that sends it back
is served by a replica only once that replica has replayed it, else by the primary.

The token is read after the unit of work commits (`deps.get_unit`, scope="function"), when
FastAPI has already built the response: it is kept in the request's state and this
middleware adds it to the response's headers as they are sent."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSISTENCY_TOKEN = "HTM-Consistency-Token"
TOKEN_STATE = "consistency_token"


class ConsistencyTokens:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_token(message: Message) -> None:
            if message["type"] == "http.response.start":
                token = scope.get("state", {}).get(TOKEN_STATE)
                if token is not None:
                    MutableHeaders(scope=message)[CONSISTENCY_TOKEN] = token
            await send(message)

        await self.app(scope, receive, send_token)
