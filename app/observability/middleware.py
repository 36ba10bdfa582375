"""One pure ASGI middleware around every request: its id, its duration in /metrics by route
template and status, and its log line (its trace span is FastAPI's own: app/tracing.py).
Pure ASGI (not BaseHTTPMiddleware): no second task, and the request's contextvars (the
request id) reach the handlers."""

from __future__ import annotations

import asyncio
import time

from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability import request_id
from app.observability.logs import log_request

UNMATCHED = "unmatched"  # no route: the raw path is never a label (unbounded, client-chosen)


def route_template(scope: Scope, base_root_path: str) -> str:
    """The matched route's path template, with the prefix of a mounted app (e.g. /mcp)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path is None:
        return UNMATCHED
    mounted = scope.get("root_path", "")[len(base_root_path) :]
    if isinstance(route, Mount):  # the mount itself (static files): its root_path holds its path
        return mounted + "/{path}"
    return (mounted + path) or "/"


class RequestObserver:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id")
        rid = request_id.accepted(given.decode("latin-1") if given else None) or request_id.new()
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        token = request_id.current.set(rid)
        base_root_path = scope.get("root_path", "")
        started = time.perf_counter()
        status: int | None = None
        cancelled = False
        left = False  # the client went away before any response started

        async def receive_watched() -> Message:
            nonlocal left
            message = await receive()
            if message["type"] == "http.disconnect" and status is None:
                left = True
            return message

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-request-id" for k, _ in headers):
                    headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive_watched, send_with_id)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            duration = time.perf_counter() - started
            if left or (status is None and cancelled):
                # The client went away before an answer (nginx's 499): whatever the app made
                # of the cut-off body (FastAPI: a 400; the MCP SDK: a 500) reached no one,
                # and a client's choice must not count as a server error.
                status = 499
            elif status is None:
                status = 500  # an exception the app renders as a 500 outside this middleware
            route = route_template(scope, base_root_path)
            _observed(scope, route, status, duration_s=duration, rid=rid)
            request_id.current.reset(token)


def _observed(scope: Scope, route: str, status: int, *, duration_s: float, rid: str) -> None:
    """The request's duration in /metrics (when the app has components) and its log line."""
    components = getattr(getattr(scope.get("app"), "state", None), "components", None)
    if components is not None:
        components.metrics.request_took(scope["method"], route, status, duration_s)
    log_request(
        scope["method"],
        route,
        status,
        duration_s=duration_s,
        rid=rid,
        namespace=scope["state"].get("namespace"),
        robot=(scope.get("path_params") or {}).get("robot"),
    )
