"""Supervision of the embedded servers a process started or shares: one thread per server
checks twice a second that it runs, and starts one that died again on its own data and
address, with bounded retries and a log line per attempt. Every process holding handles on a
data directory supervises it; the directory's lock makes one of them restart it and the others
find it running.

What each supervisor knows is kept by server URL, so /readyz can say, for the URLs its app
uses, whether an embedded server is running, being restarted, or was given up on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

CHECK_EVERY_S = 0.5
# Waits before attempts 2..5 (the first is immediate): about 15 s in all before giving up.
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
MAX_ATTEMPTS = len(BACKOFF_S)


class Supervised(Protocol):
    def alive(self) -> bool: ...

    def revive(self) -> bool: ...


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class Health:
    """What the supervisor knows of one server."""

    state: str = "running"  # running | restarting | gave_up
    restarts: int = 0  # times it was found dead and came back
    attempt: int = 0  # failed attempts of the current restart
    error: str | None = None

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "restarts": self.restarts}
        if self.state != "running":
            out |= {"attempts": self.attempt, "max_attempts": MAX_ATTEMPTS, "error": self.error}
        return out

    def why(self) -> str | None:
        """What /readyz adds to 'unavailable' (None while it runs)."""
        if self.state == "restarting":
            return (
                f"the embedded server is being restarted (attempt {self.attempt + 1} of "
                f"{MAX_ATTEMPTS}; last error: {self.error})"
            )
        if self.state == "gave_up":
            return (
                f"the embedded server could not be restarted ({MAX_ATTEMPTS} attempts; last "
                f"error: {self.error}): fix that, then restart the service"
            )
        return None


class Supervisor:
    def __init__(self, interval_s: float = CHECK_EVERY_S) -> None:
        self.interval_s = interval_s
        self.health: dict[str, Health] = {}
        self._servers: dict[str, tuple[Supervised, str]] = {}
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    def watch(self, name: str, server: Supervised, where: str) -> None:
        self._servers[name] = (server, where)
        self.health[name] = Health()

    def start(self) -> Supervisor:
        for name, (server, where) in self._servers.items():
            t = threading.Thread(
                target=self._run, args=(name, server, where), name=f"supervise {name}", daemon=True
            )
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop supervising (before the servers are released); waits for a restart in
        progress to finish, so none starts a server after its handles are gone."""
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads.clear()

    def _run(self, name: str, server: Supervised, where: str) -> None:
        health = self.health[name]
        next_try = 0.0
        while not self._stop.wait(self.interval_s):
            try:
                up = server.alive()
            except Exception as exc:  # a check that fails is not a verdict: look again
                log.warning("checking embedded %s (%s) failed: %s", name, where, one_line(exc))
                continue
            if up:
                if health.state != "running":
                    log.warning("embedded %s (%s) is running again", name, where)
                    health.state, health.attempt, health.error = "running", 0, None
                    health.restarts += 1
                continue
            if health.state == "gave_up" or time.monotonic() < next_try:
                continue
            if health.state == "running":
                log.warning("embedded %s (%s) is down", name, where)
                health.state = "restarting"
            self._attempt(name, server, where, health)
            if health.state == "restarting":
                next_try = time.monotonic() + BACKOFF_S[health.attempt - 1]

    def _attempt(self, name: str, server: Supervised, where: str, health: Health) -> None:
        n = health.attempt + 1
        log.warning(
            "starting embedded %s (%s) again: attempt %d of %d", name, where, n, MAX_ATTEMPTS
        )
        try:
            started = server.revive()
        except Exception as exc:
            health.attempt, health.error = n, one_line(exc)
            if n >= MAX_ATTEMPTS:
                health.state = "gave_up"
                log.error(
                    "embedded %s (%s) could not be restarted after %d attempts: %s. /readyz "
                    "reports it down; fix that, then restart the service",
                    name, where, n, health.error,
                )  # fmt: skip
            else:
                log.warning(
                    "embedded %s (%s) did not start (attempt %d of %d): %s; next attempt in "
                    "%.1f s",
                    name, where, n, MAX_ATTEMPTS, health.error, BACKOFF_S[n - 1],
                )  # fmt: skip
            return
        by = "" if started else " (another process started it)"
        log.warning("embedded %s (%s) is running again%s", name, where, by)
        health.state, health.attempt, health.error = "running", 0, None
        health.restarts += 1


# --- what /readyz reads ---------------------------------------------------------------------

_by_url: dict[str, Callable[[], Health]] = {}
_registry_lock = threading.Lock()


def register(url: str, health: Callable[[], Health]) -> None:
    with _registry_lock:
        _by_url[url] = health


def unregister(url: str) -> None:
    with _registry_lock:
        _by_url.pop(url, None)


def embedded_health(**urls: str | None) -> dict[str, Health]:
    """For each named URL that is an embedded server's of this process, what its supervisor
    knows (e.g. embedded_health(postgres=database_url, redis=redis_url))."""
    with _registry_lock:
        return {name: _by_url[url]() for name, url in urls.items() if url in _by_url}


@dataclass
class SharedHealth:
    """What this process's supervisors know of the embedded servers at `urls`, for the
    processes it spawns (`htm serve --workers`), whose /readyz then reports it as one
    process's does: a JSON copy in shared memory, published as often as a supervisor
    checks. Pickled into each spawned process, which `register`s it there."""

    urls: list[str]
    copy: Any  # a spawn context's Array of bytes

    SIZE = 4096
    ERROR_CHARS = 500  # each server's last error, at most, so that the copy fits

    @classmethod
    def of(cls, *urls: str | None) -> SharedHealth | None:
        """For those of `urls` that are embedded servers of this process (None if none)."""
        with _registry_lock:
            known = [url for url in urls if url is not None and url in _by_url]
        if not known:
            return None
        return cls(known, multiprocessing.get_context("spawn").Array("c", cls.SIZE))

    def publish(self) -> None:
        with _registry_lock:
            health = {url: asdict(_by_url[url]()) for url in self.urls if url in _by_url}
        for h in health.values():
            h["error"] = h["error"] and h["error"][: self.ERROR_CHARS]
        self.copy.value = json.dumps(health).encode()

    @contextlib.contextmanager
    def publishing(self) -> Iterator[SharedHealth]:
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(CHECK_EVERY_S):
                self.publish()

        self.publish()
        thread = threading.Thread(target=run, name="publish embedded health", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    def register(self) -> None:
        """In a spawned process: what `embedded_health` reads for these URLs."""
        for url in self.urls:
            register(url, lambda url=url: self._read(url))  # type: ignore[misc]

    def _read(self, url: str) -> Health:
        return Health(**json.loads(self.copy.value or b"{}").get(url, {}))
