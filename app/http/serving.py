"""`htm serve`'s server: uvicorn with the service's protocol options and a drain before it
stops, and the rule that keeps an unauthenticated service on loopback."""

from __future__ import annotations

import ipaddress
import logging
import signal
import time
from types import FrameType

import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.http.draining import start_draining
from app.http.protocol import uvicorn_options

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

    def __init__(self, config: uvicorn.Config, *, app: FastAPI, grace_s: float) -> None:
        super().__init__(config)
        self.app = app
        self.grace_s = grace_s
        self.exit_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.exit_at is None:
            log.info("%s: draining (/readyz now 503)", signal.Signals(sig).name)
            start_draining(self.app)
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


def run(
    app: FastAPI, settings: Settings, host: str, port: int, *, access_log: bool = False
) -> None:
    """Serve the app on host:port until a signal drains and stops it."""
    log.info("serving on http://%s:%s", host, port)
    config = uvicorn.Config(
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
        **uvicorn_options(settings),
    )
    DrainingServer(config, app=app, grace_s=settings.shutdown_grace_s).run()
