"""`htm serve`'s server: uvicorn with the service's protocol options and a drain before it
stops, and the rule that keeps an unauthenticated service on loopback. (Several processes,
`--workers`: app/http/multiprocess.py.)

The drain overrides uvicorn's internals (`Server.shutdown`, its `server_state`), written
against uvicorn 0.54: pyproject.toml pins that minor.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from socket import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.health.service import local_faults
from app.http.draining import start_draining
from app.http.protocol import DrainState, ServiceProtocol, WorkerProtocol, uvicorn_options
from app.observability.logs import QuietAtStart

log = logging.getLogger("htm")
uvicorn_log = logging.getLogger("uvicorn.error")  # the lines uvicorn's own shutdown writes


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) and `localhost`; any other name may
    resolve to a public address, so it counts as public."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def ready_line(host: str, port: int, faults: Sequence[str] = ()) -> str:
    """What `htm serve` prints once the port answers: where the API, its docs and the
    dashboard are (a wildcard host shown as localhost, the address to open on this machine).
    `faults`: what this process knows is down (app/health/service.local_faults), which /readyz
    answers 503 for: then the line says "not ready", not "ready"."""
    shown = "localhost" if host in ("", "0.0.0.0", "::") else host
    base = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
    where = f"API {base}, docs {base}/docs, dashboard {base}/ui"
    if faults:
        return f"not ready: {', '.join(faults)} unavailable ({base}/readyz says why); {where}"
    return f"ready: {where}"


def announce_ready(
    host: str, port: int, faults: Callable[[], Sequence[str]] = tuple
) -> Callable[[], None]:
    """The ready line on stdout (the logs are on stderr), once."""
    said = False

    def announce() -> None:
        nonlocal said
        if not said:
            said = True
            print(ready_line(host, port, faults()), file=sys.stdout, flush=True)

    return announce


def _faults(app: FastAPI) -> list[str]:
    """What the started app's components know is down (none before the lifespan made them)."""
    components = getattr(app.state, "components", None)
    if components is None:
        return []
    return sorted(local_faults(components.embedder, components.tokenizer))


# uvicorn's lines before the app answers, DEBUG. "Uvicorn running on ..." is written when the
# socket is bound, seconds before the port answers: in every process. The others only in a
# single-process `htm serve`, whose ready line says them (`run`); with --workers each
# worker's "Started server process [pid]" names it, and stays.
_BOUND_EARLY = QuietAtStart("Uvicorn running on")
uvicorn_log.addFilter(_BOUND_EARLY)
_STARTING = QuietAtStart(
    "Started server process", "Waiting for application startup.", "Application startup complete."
)


def refuse_unauthenticated(settings: Settings, host: str) -> str | None:
    """Why `htm serve` must not listen on `host`, or None when it may: with auth off, anyone
    who reaches the port may read and change every namespace."""
    if settings.auth_enabled or settings.allow_unauthenticated or is_loopback(host):
        return None
    return (
        f"refusing to listen on {host} with auth off: anyone who can reach it could read and "
        "change every namespace. Set HTM_AUTH_ENABLED=true (and create keys with `htm keys "
        "create`), or set HTM_ALLOW_UNAUTHENTICATED=true if the network in front of it is "
        "trusted."
    )


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with a drain before it stops.

    The first SIGTERM or SIGINT flips /readyz to 503 at once. The listening socket stays open
    for `shutdown_grace_s` (0 by default; the Kubernetes preStop pattern: the load balancer
    sees the pod unready and stops sending it traffic while it still answers). Then the
    drain (`shutdown`), within `shutdown_timeout_s` (what still runs then is cancelled):

    1. The listener closes, so a client's connect is refused and it knows it sent nothing.
       The connections waiting in its queue are taken first: closing it would reset them
       after their clients may have sent a request.
    2. Every request that begins from now on gets 503 problem+json with `Retry-After` and
       `Connection: close`, nothing processed; each request in flight gets its own answer,
       then its connection closes (app/http/protocol.py).
    3. A connection between two requests is closed once it has been quiet for a moment
       (IDLE_QUIET_S): a client between two requests sends the next within milliseconds.

    Then the lifespan's shutdown: background workers, then the embedder, Redis and the pools
    (app.main). Another SIGINT (Ctrl-C) ends the grace period early; one more stops waiting
    for requests, like uvicorn's second Ctrl-C. A repeated SIGTERM changes nothing, as in
    uvicorn: a process manager that signals the whole process group (systemd, `timeout`)
    and `htm serve --workers`' supervisor each send a worker one.

    Unlike uvicorn's own handler this one does not re-raise the signal once the server has
    stopped: a drained shutdown is a clean exit (0), and `htm serve` still has embedded
    servers to stop after uvicorn returns (a re-raised SIGTERM would kill it before that).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        app: FastAPI | None = None,
        grace_s: float,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.server_state: DrainState = DrainState()
        self.app = app  # None in a worker process: the one worker_app made there
        self.grace_s = grace_s
        self.on_started = on_started
        self.exit_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.exit_at is None:
            log.info("%s: draining (/readyz now 503)", signal.Signals(sig).name)
            app = self.app or _worker_app
            if app is not None:
                start_draining(app)
            self.exit_at = time.monotonic() + self.grace_s
            self.should_exit = self.grace_s <= 0
        elif sig != signal.SIGINT:
            return
        elif not self.should_exit:
            self.should_exit = True
        else:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.exit_at is not None and time.monotonic() >= self.exit_at:
            self.should_exit = True
        return await super().on_tick(counter)

    async def startup(self, sockets: list[socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket] | None = None) -> None:
        uvicorn_log.info("Shutting down")
        state = self.server_state
        state.draining = True
        for connection in list(state.connections):
            connection.shutdown()
        queued = [conn for sock in sockets or [] for conn in _accept_queued(sock)]
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        loop = asyncio.get_running_loop()
        for conn in queued:  # their protocols answer 503 from the start (connection_made)
            await loop.connect_accepted_socket(self._connection, conn)
        try:
            await asyncio.wait_for(self._drain(), timeout=self.config.timeout_graceful_shutdown)
        except TimeoutError:
            uvicorn_log.error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded", len(state.tasks)
            )
            for task in state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if state.refused:
            log.info("the drain answered %d request(s) 503", state.refused)
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drain(self) -> None:
        """Until every connection has closed (each idle one closed by the drain) and no
        request is running."""
        state = self.server_state
        if state.tasks:
            log.info("draining: %d request(s) in flight", len(state.tasks))
        # Looked at every 50 ms, as uvicorn does: a connection turns idle in several ways (an
        # answer sent, a task's end, bytes read, time), each seen by the next look.
        while (state.connections or state.tasks) and not self.force_exit:
            for connection in list(state.connections):
                if isinstance(connection, ServiceProtocol):
                    connection.close_if_idle()
            await asyncio.sleep(0.05)
        for server in self.servers:
            await server.wait_closed()

    def _connection(self) -> asyncio.Protocol:
        """A protocol as uvicorn's `startup` makes one for each connection."""
        return self.config.http_protocol_class(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )


def _accept_queued(sock: socket) -> list[socket]:
    """The connections waiting in a listener's queue. The kernel has completed them, so
    their clients may have sent a request; the event loop takes them between other work,
    so under load some are always waiting."""
    sock.setblocking(False)
    taken: list[socket] = []
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:  # BlockingIOError: none left
            return taken
        taken.append(conn)


def uvicorn_config(
    app: FastAPI | str,
    settings: Settings,
    host: str,
    port: int,
    *,
    access_log: bool,
    worker: bool = False,
    **extra: object,
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level,
        # No logging config of uvicorn's own: its loggers write through the root
        # handler in HTM_LOG_FORMAT (configure_logging). The service logs each request
        # itself (app/observability); --access-log adds uvicorn's lines.
        log_config=None,
        access_log=access_log,
        # Typed int, used as asyncio.wait_for's timeout: a float is as good.
        timeout_graceful_shutdown=settings.shutdown_timeout_s,  # type: ignore[arg-type]
        # The protocol with a deadline and a bound on a request's line and headers.
        **uvicorn_options(settings, worker=worker),
        **extra,  # type: ignore[arg-type]
    )


def run(
    app: FastAPI, settings: Settings, host: str, port: int, *, access_log: bool = False
) -> None:
    """Serve the app on host:port until a signal drains and stops it; the ready line once
    the app has started and the socket is served."""
    config = uvicorn_config(app, settings, host, port, access_log=access_log)
    uvicorn_log.addFilter(_STARTING)
    # The listening socket is the server's own to close: its drain takes the connections
    # waiting in its queue first.
    sock = config.bind_socket()
    try:
        DrainingServer(
            config,
            app=app,
            grace_s=settings.shutdown_grace_s,
            on_started=announce_ready(host, port, lambda: _faults(app)),
        ).run([sock])
    finally:
        sock.close()


# --- a worker process of htm serve --workers N (app/http/multiprocess.py) -------------------

# The app of this worker process (app.main.worker_app puts it here), for the drain.
_worker_app: FastAPI | None = None


def serving_app(app: FastAPI, settings: Settings) -> FastAPI:
    """Make `app` the one this worker process's server drains, with `settings`' header
    timeout on its connections."""
    global _worker_app
    _worker_app = app
    WorkerProtocol.header_timeout_s = settings.header_timeout_s
    return app
