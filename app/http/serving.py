"""`htm serve`'s server: uvicorn with the service's protocol options and a drain before it
stops, and the rule that keeps an unauthenticated service on loopback."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import time
from socket import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess
from uvicorn.supervisors.multiprocess import Process as UvicornProcess

from app.config import Settings
from app.http.draining import start_draining
from app.http.protocol import WorkerProtocol, uvicorn_options

log = logging.getLogger("htm")


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
    sees the pod unready and stops sending it traffic while it still answers), then uvicorn
    stops accepting, waits up to `shutdown_timeout_s` for in-flight requests (cancelling what
    is left) and runs the lifespan's shutdown: background workers, then the embedder, Redis
    and the pools (app.main). Another signal ends the grace period early; one more (the
    second, without a grace period) stops waiting for requests, like uvicorn's second Ctrl-C.

    Unlike uvicorn's own handler this one does not re-raise the signal once the server has
    stopped: a drained shutdown is a clean exit (0), and `htm serve` still has embedded
    servers to stop after uvicorn returns (a re-raised SIGTERM would kill it before that).
    """

    def __init__(
        self, config: uvicorn.Config, *, app: FastAPI | None = None, grace_s: float
    ) -> None:
        super().__init__(config)
        self.app = app  # None in a worker process: the one worker_app made there
        self.grace_s = grace_s
        self.exit_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.exit_at is None:
            log.info("%s: draining (/readyz now 503)", signal.Signals(sig).name)
            app = self.app or _worker_app
            if app is not None:
                start_draining(app)
            self.exit_at = time.monotonic() + self.grace_s
            self.should_exit = self.grace_s <= 0
        elif not self.should_exit:
            self.should_exit = True
        else:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.exit_at is not None and time.monotonic() >= self.exit_at:
            self.should_exit = True
        return await super().on_tick(counter)


def _config(
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
    """Serve the app on host:port until a signal drains and stops it."""
    log.info("serving on http://%s:%s", host, port)
    config = _config(app, settings, host, port, access_log=access_log)
    DrainingServer(config, app=app, grace_s=settings.shutdown_grace_s).run()


# --- several processes (htm serve --workers N) ----------------------------------------------

# The app of this worker process (app.main.worker_app puts it here), for the drain.
_worker_app: FastAPI | None = None


def serving_app(app: FastAPI, settings: Settings) -> FastAPI:
    """Make `app` the one this worker process's server drains, with `settings`' header
    timeout on its connections."""
    global _worker_app
    _worker_app = app
    WorkerProtocol.header_timeout_s = settings.header_timeout_s
    return app


class WorkerProcess(UvicornProcess):
    """uvicorn's worker process, serving with the drain (DrainingServer)."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket], grace_s: float) -> None:
        self.grace_s = grace_s
        super().__init__(config, sockets)

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(config=self.config, grace_s=self.grace_s)
        return self._server


class Workers(Multiprocess):
    """uvicorn's supervisor (a worker that dies is replaced, one that fails at start stops
    them all; SIGTERM or SIGINT stops them all, each draining as one process does), its
    processes WorkerProcesses. (uvicorn's SIGHUP restart makes plain workers, without the
    drain's grace period.)"""

    def __init__(self, config: uvicorn.Config, sockets: list[socket], grace_s: float) -> None:
        super().__init__(config, sockets)
        self.grace_s = grace_s

    def init_processes(self) -> None:
        for _ in range(self.processes_num):
            process = WorkerProcess(self.config, self.sockets, self.grace_s)
            process.start()
            self.processes.append(process)

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving (the app, the database, the socket): so would a
                # replacement. Stop them all, as uvicorn's supervisor does.
                log.error("worker process %s failed to start: stopping", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.warning("worker process %s died: starting another", process.pid)
            replacement = WorkerProcess(self.config, self.sockets, self.grace_s)
            replacement.start()
            self.processes[idx] = replacement


def run_workers(
    settings: Settings, host: str, port: int, workers: int, *, access_log: bool = False
) -> None:
    """Serve on host:port from `workers` processes sharing one listening socket (uvicorn's
    supervisor), until a signal drains and stops them. Each worker builds its app from the
    environment: `settings`' database and Redis URLs are put there first."""
    if settings.database_url:
        os.environ["HTM_DATABASE_URL"] = settings.database_url
    if settings.redis_url:
        os.environ["HTM_REDIS_URL"] = settings.redis_url
    log.info("serving on http://%s:%s from %d processes", host, port, workers)
    config = _config(
        "app.main:worker_app", settings, host, port,
        access_log=access_log, worker=True, factory=True, workers=workers,
    )  # fmt: skip
    sock = config.bind_socket()
    try:
        Workers(config, [sock], settings.shutdown_grace_s).run()
    finally:
        sock.close()
