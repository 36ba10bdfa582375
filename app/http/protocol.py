"""What `htm serve` gives uvicorn besides the app: a deadline on each request's headers.

uvicorn bounds neither how long a client takes to send a request's headers nor its body:
`timeout_keep_alive` closes a connection idle between two requests, and any byte received
cancels it, so a client sending a byte a second (or nothing, after connecting) holds its
connection for as long as it likes. The body's deadline is the app's (app/http/middleware.py:
there is a request by then, answered 408 through ASGI); the headers' is kept here, before
there is a request to hand the app: from the connection's opening, or from the first byte
of the next request on a kept-alive one, its headers must be in within `header_timeout_s`,
else 408 and the connection is closed. Their size is bounded too (431 past MAX_HEADER_BYTES):
uvicorn's httptools protocol gathers a request line and headers without limit (only its h11
protocol has one, h11_max_incomplete_event_size). Built on the httptools protocol (what
uvicorn's "auto" picks: uvicorn[standard] installs httptools).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings
from app.errors import PROBLEM_BASE, PROBLEM_JSON

log = logging.getLogger(__name__)

# A request line and headers, at most (nginx's default buffers hold 32 KiB, h11's 16 KiB).
MAX_HEADER_BYTES = 64 * 1024


def _problem_response(status: int, reason: str, type_: str, detail: str, **extra: Any) -> bytes:
    """A whole HTTP/1.1 response, written before there is a request to hand the app."""
    problem = {"type": PROBLEM_BASE + type_, "title": reason, "status": status, "detail": detail}
    body = json.dumps(problem | extra).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"content-type: {PROBLEM_JSON}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class HeaderDeadlineProtocol(HttpToolsProtocol):
    header_timeout_s = 10.0  # a subclass per setting: uvicorn makes the instances

    _deadline: asyncio.TimerHandle | None = None  # armed while a request's headers come in
    _header_bytes = 0

    @classmethod
    def with_timeout(cls, header_timeout_s: float) -> type[HeaderDeadlineProtocol]:
        return type(cls.__name__, (cls,), {"header_timeout_s": header_timeout_s})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        # Counted while one request's headers come in, from before to after this data: data
        # that also holds a previous request (pipelined) or ends the headers is not counted.
        before = self._deadline
        super().data_received(data)
        if before is None or self._deadline is not before:
            return
        self._header_bytes += len(data)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(
                _problem_response(
                    431,
                    "Request Header Fields Too Large",
                    "request-header-fields-too-large",
                    f"the request line and headers are over {MAX_HEADER_BYTES} bytes",
                    limit=MAX_HEADER_BYTES,
                )
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        # Armed once per request: a request begun on a new connection keeps the deadline
        # counted from the connection's opening.
        if self._deadline is None:
            self._header_bytes = 0
            self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        log.info("request headers not received in %g s: 408, closed", self.header_timeout_s)
        self._refuse(
            _problem_response(
                408,
                "Request Timeout",
                "request-timeout",
                f"the request's headers did not arrive within {self.header_timeout_s:g} s",
                timeout_s=self.header_timeout_s,
            )
        )

    def _refuse(self, response: bytes) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()


class WorkerProtocol(HeaderDeadlineProtocol):
    """The protocol of an `htm serve --workers N` process. uvicorn hands a worker its
    protocol class by name (a class made per setting does not cross to a spawned process),
    so the worker's app sets the timeout here from its own settings (app.main.worker_app)."""


def uvicorn_options(settings: Settings, *, worker: bool = False) -> dict[str, Any]:
    """uvicorn.Config's arguments that come from the settings (besides host and port).
    `worker`: for processes uvicorn spawns (the protocol named, its timeout set there)."""
    if worker:
        return {"http": f"{__name__}:WorkerProtocol"}
    return {"http": HeaderDeadlineProtocol.with_timeout(settings.header_timeout_s)}
