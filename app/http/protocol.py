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

The protocol's part of the drain (app/http/serving.DrainingServer): once the server drains,
a request that begins on a connection is answered 503 (nothing processed; `Retry-After`,
`Connection: close`), the one in flight gets its own answer and then the connection closes,
and a connection is closed between two requests only once it has been quiet for a moment
(see `ServiceProtocol.shutdown` and `idle`).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import struct
import termios
from typing import Any

from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.config import Settings
from app.errors import PROBLEM_BASE, PROBLEM_JSON

log = logging.getLogger(__name__)

# A request line and headers, at most (nginx's default buffers hold 32 KiB, h11's 16 KiB).
MAX_HEADER_BYTES = 64 * 1024
# What a request refused by the drain is told to wait before it tries again (elsewhere).
RETRY_AFTER_S = 1
# The drain closes a kept-alive connection once its last answer is this old: a client between
# two requests sends the next within milliseconds, and a close then would cross it.
IDLE_QUIET_S = 0.5


def _problem(status: int, title: str, type_: str, detail: str, **extra: Any) -> bytes:
    problem = {"type": PROBLEM_BASE + type_, "title": title, "status": status, "detail": detail}
    return json.dumps(problem | extra).encode()


def _problem_response(status: int, reason: str, type_: str, detail: str, **extra: Any) -> bytes:
    """A whole HTTP/1.1 response, written before there is a request to hand the app."""
    body = _problem(status, reason, type_, detail, **extra)
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"content-type: {PROBLEM_JSON}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


SHUTTING_DOWN = _problem(
    503,
    "Service unavailable",
    "unavailable",
    "the service is shutting down; the request was not processed: retry it",
    draining=True,
)


class DrainState(ServerState):
    """uvicorn's state shared by a server's connections, and the drain's: whether it has
    begun, and how many requests it refused."""

    def __init__(self) -> None:
        super().__init__()
        self.draining = False
        self.refused = 0


def _unread(transport: asyncio.Transport) -> int:
    """Bytes the kernel holds for this connection that the server has not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:  # closed meanwhile
        return 0
    return int(struct.unpack("i", raw)[0])


class ServiceProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a bound on a request's headers, and
    its part of the drain."""

    header_timeout_s = 10.0  # a subclass per setting: uvicorn makes the instances

    _deadline: asyncio.TimerHandle | None = None  # armed while a request's headers come in
    _header_bytes = 0
    _begun = False  # a request's first bytes are in, its headers not all
    _answered_at: float | None = None  # the loop's time of the last answer

    @classmethod
    def with_timeout(cls, header_timeout_s: float) -> type[ServiceProtocol]:
        return type(cls.__name__, (cls,), {"header_timeout_s": header_timeout_s})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._draining:  # taken from the listener's queue as it closed
            self.app = self._shutting_down
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
        self._begun = True
        self._arm()

    def on_headers_complete(self) -> None:
        self._begun = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self._answered_at = self.loop.time()
        super().on_response_complete()

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

    # --- the drain ------------------------------------------------------------------------

    @property
    def _draining(self) -> bool:
        return isinstance(self.server_state, DrainState) and self.server_state.draining

    def shutdown(self) -> None:
        """The drain has begun (the server calls this on each of its connections).

        A request that begins from now on is answered 503 (`_shutting_down`). The request in
        flight gets its own answer, then the connection closes (with requests pipelined
        behind it: after the last of them). An idle connection stays open for now, unlike
        uvicorn's, which closes it here: its client may be sending the next request at this
        very moment, and that request would get no answer, not even a refusal; the server
        closes it with `close_if_idle` once it is `idle`.
        """
        self.app = self._shutting_down
        if self.pipeline:  # the last request queued behind the one in flight
            self.pipeline[0][0].keep_alive = False
        elif self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False

    @property
    def idle(self) -> bool:
        """Between two requests, quiet for IDLE_QUIET_S: none in flight or queued, none begun,
        no byte of one waiting in the kernel (a busy event loop reads them late), the last
        answered that long ago. A connection that has carried no request yet is not idle: its
        client opened it to send one (the header deadline closes it if none comes)."""
        if self._answered_at is None or self.loop.time() - self._answered_at < IDLE_QUIET_S:
            return False
        if self.cycle is not None and not self.cycle.response_complete:
            return False
        return not self.pipeline and not self._begun and _unread(self.transport) == 0

    def close_if_idle(self) -> None:
        if not self.transport.is_closing() and self.idle:
            self.transport.close()

    async def _shutting_down(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """The answer to a request that begins during the drain: 503, nothing processed.
        Its body is read first: closing a connection with unread bytes resets it, and a
        reset can discard the answer before the client has read it."""
        if isinstance(self.server_state, DrainState):
            self.server_state.refused += 1
        while (await receive()).get("more_body", False):
            pass
        headers = [
            (b"content-type", PROBLEM_JSON.encode()),
            (b"content-length", str(len(SHUTTING_DOWN)).encode()),
            (b"retry-after", str(RETRY_AFTER_S).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": SHUTTING_DOWN})


class WorkerProtocol(ServiceProtocol):
    """The protocol of an `htm serve --workers N` process. uvicorn hands a worker its
    protocol class by name (a class made per setting does not cross to a spawned process),
    so the worker's app sets the timeout here from its own settings (app.main.worker_app)."""


def uvicorn_options(settings: Settings, *, worker: bool = False) -> dict[str, Any]:
    """uvicorn.Config's arguments that come from the settings (besides host and port).
    `worker`: for processes uvicorn spawns (the protocol named, its timeout set there)."""
    if worker:
        return {"http": f"{__name__}:WorkerProtocol"}
    return {"http": ServiceProtocol.with_timeout(settings.header_timeout_s)}
