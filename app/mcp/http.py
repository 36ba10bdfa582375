"""/mcp: the MCP streamable HTTP transport behind the REST API's auth.

Each request is identified as a REST request is (`Authorization: Bearer <key>` with auth on,
else `X-Namespace`): no key, no MCP (401 problem+json before the protocol starts). The caller
rides in the request's scope state to the tool call (app/mcp/server.py checks its role per
tool). Stateless, with JSON answers: any process behind a load balancer can answer any call,
and there is no session to keep. The SDK's session manager runs once per lifespan
(`running`, entered by the composition root)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.auth.caller import Caller, identify, rechecker
from app.components import Components
from app.config import Settings
from app.errors import DomainError, ServiceUnavailable
from app.mcp.server import build_server
from app.mcp.tools import enabled
from app.observability import request_id
from app.observability.logs import QuietAtStart
from app.problem import problem

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The SDK's transport logs "Terminating session: None" at INFO when each stateless request
# ends: a line per MCP request that says nothing (the request's own line, htm.request, is
# the one to read). Only that record is dropped; the logger's warnings and errors still show.
_TRANSPORT_LOGGER = "mcp.server.streamable_http"


def _not_session_noise(record: logging.LogRecord) -> bool:
    return not (isinstance(record.msg, str) and record.msg.startswith("Terminating session"))


# The session manager's "started" line, written while the service starts: DEBUG.
_MANAGER_LOGGER = "mcp.server.streamable_http_manager"
_MANAGER_STARTED = QuietAtStart("StreamableHTTP session manager started")


def _security(settings: Settings) -> TransportSecuritySettings | None:
    """As the SDK does for a server on loopback: refuse other Host and Origin headers, so a
    web page cannot reach a local service through DNS rebinding."""
    if settings.host not in LOOPBACK:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


class McpEndpoint:
    def __init__(self, settings: Settings) -> None:
        enabled(settings.mcp_tools)  # an unknown tool name stops the start, saying what there is
        # Once per process, whatever the apps in it (a filter is added once, never removed).
        logging.getLogger(_TRANSPORT_LOGGER).addFilter(_not_session_noise)
        logging.getLogger(_MANAGER_LOGGER).addFilter(_MANAGER_STARTED)
        self.settings = settings
        self.server = build_server(self._current, _caller_of, _robot_of, _allowed_of)
        self._components: Components | None = None
        self._manager: StreamableHTTPSessionManager | None = None

    def _current(self) -> Components:
        assert self._components is not None, "/mcp answers only while the app runs"
        return self._components

    @asynccontextmanager
    async def running(self, components: Components) -> AsyncIterator[None]:
        manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=True,
            json_response=True,
            security_settings=_security(self.settings),
        )
        self._components = components
        ready, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            # The SDK's task group is entered and left in this one task: a lifespan's start
            # and end may run in different tasks (an async test fixture's do).
            async with manager.run():
                self._manager = manager
                ready.set()
                try:
                    await stop.wait()
                finally:
                    self._manager = None

        task = asyncio.create_task(hold(), name="mcp session manager")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # it failed to start: raise why
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager, c = self._manager, self._components
        rid = request_id.of(scope)
        try:
            if manager is None or c is None:
                raise ServiceUnavailable("not ready: the service is starting or stopping")
            request = Request(scope)
            caller = await identify(
                request.headers.get("authorization", ""),
                request.headers.get("x-namespace"),
                auth_enabled=c.settings.auth_enabled,
                sessionmaker=c.sessionmaker,
                namespace_ids=c.namespace_ids,
                key_cache=c.key_cache,
            )
        except DomainError as exc:
            answer = problem(
                exc.status,
                exc.type,
                exc.title,
                detail=exc.detail,
                instance="/mcp",
                request_id=rid,
                **exc.extra,
            )
            await answer(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["caller"] = caller
        state["robot"] = request.headers.get("x-robot") or None  # checked where used
        state["namespace"] = caller.namespace  # for the request's log line
        state["allowed"] = rechecker(  # a subscription outlives its request's identification
            request.headers.get("authorization", ""),
            auth_enabled=c.settings.auth_enabled,
            sessionmaker=c.sessionmaker,
            key_cache=c.key_cache,
        )
        await manager.handle_request(scope, receive, send)


def _robot_of(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    assert isinstance(request, Request), "a tool call over HTTP carries its request"
    robot: str | None = request.scope["state"].get("robot")
    return robot


def _allowed_of(ctx: ServerRequestContext[Any]) -> Callable[[], Awaitable[bool]]:
    request = ctx.request
    assert isinstance(request, Request), "a request over HTTP carries its request"
    allowed: Callable[[], Awaitable[bool]] = request.scope["state"]["allowed"]
    return allowed


def _caller_of(ctx: ServerRequestContext[Any]) -> Caller:
    request = ctx.request
    assert isinstance(request, Request), "a tool call over HTTP carries its request"
    caller: Caller = request.scope["state"]["caller"]
    return caller
