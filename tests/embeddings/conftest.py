"""Fixtures for the embedding tests: a stub HTTP server and the real local model.

The stub is a real HTTP server (Starlette under uvicorn, in a thread) standing in for Ollama
and OpenAI-compatible servers; our providers talk to it over TCP like to the real thing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from app.embeddings import LocalEmbedder

# The bundled model must load without the Hugging Face hub; fail rather than download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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


@pytest.fixture(scope="session")
def stub_server() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


@pytest.fixture
def stub(stub_server: StubServer) -> Iterator[StubServer]:
    stub_server.reset()
    yield stub_server
    stub_server.reset()


@pytest.fixture
def closed_port_url() -> str:
    """A URL on which nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def local_embedder() -> AsyncIterator[LocalEmbedder]:
    embedder = await LocalEmbedder.create("all-MiniLM-L6-v2", 384)
    yield embedder
    await embedder.aclose()
