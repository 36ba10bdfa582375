"""A real HTTP server standing in for third-party providers (Ollama, OpenAI-compatible).

Starlette under uvicorn in a thread on a loopback port: our code talks to it over TCP exactly
as to the real thing; only the third party is replaced, never our own code.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Reply = Callable[[Recorded], tuple[int, Any]]


class StubServer:
    """Records every request and answers with `reply(request)` after `delay_s`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.reply: Reply = lambda _req: (200, {})
        self.delay_s = 0.0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> StubServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("stub server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def reset(self) -> None:
        self.requests.clear()
        self.reply = lambda _req: (200, {})
        self.delay_s = 0.0

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        recorded = Recorded(
            request.method, request.url.path, dict(request.headers), json.loads(raw or b"null")
        )
        self.requests.append(recorded)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        status, payload = self.reply(recorded)
        if isinstance(payload, str):
            return PlainTextResponse(payload, status_code=status)
        return JSONResponse(payload, status_code=status)
