"""The embedded launcher: starts, stops cleanly, and reuses its data directory."""

import asyncio
from pathlib import Path

import asyncpg
import psutil
import redis

from app.embedded import EmbeddedPostgres, EmbeddedRedis, embedded_services


def _postgres_pids(data_dir: Path) -> list[int]:
    pids = []
    for proc in psutil.process_iter(attrs=["name", "cmdline"]):
        if proc.info["name"] == "postgres" and str(data_dir) in " ".join(
            proc.info["cmdline"] or []
        ):
            pids.append(proc.pid)
    return pids


async def _sql(pg: EmbeddedPostgres, sql: str) -> object:
    conn = await asyncpg.connect(host=pg.socket_dir, user="postgres", database="htm")
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def test_embedded_postgres_reuses_its_data_and_stops(tmp_path: Path) -> None:
    data = tmp_path / "pgdata"
    pg = await asyncio.to_thread(EmbeddedPostgres(data).start)
    await _sql(pg, "CREATE TABLE kept (v text)")
    await _sql(pg, "INSERT INTO kept VALUES ('still here')")
    await _sql(pg, "CREATE EXTENSION IF NOT EXISTS vector")
    await asyncio.to_thread(pg.stop)
    assert _postgres_pids(data) == []

    pg = await asyncio.to_thread(EmbeddedPostgres(data).start)
    try:
        assert await _sql(pg, "SELECT v FROM kept") == "still here"
        assert await _sql(pg, "SELECT extversion FROM pg_extension WHERE extname='vector'")
    finally:
        await asyncio.to_thread(pg.stop)
    assert _postgres_pids(data) == []


async def test_embedded_postgres_sizes_shared_buffers_for_the_working_set(tmp_path: Path) -> None:
    data = tmp_path / "pgdata"
    pg = await asyncio.to_thread(EmbeddedPostgres(data).start)
    try:
        assert await _sql(pg, "SHOW shared_buffers") == "1GB"
        # Kept in the data directory: the next start needs no second restart.
        assert "shared_buffers = '1GB'" in (data / "postgresql.auto.conf").read_text()
    finally:
        await asyncio.to_thread(pg.stop)
    pg = await asyncio.to_thread(EmbeddedPostgres(data, shared_buffers="256MB").start)
    try:
        assert await _sql(pg, "SHOW shared_buffers") == "256MB"
    finally:
        await asyncio.to_thread(pg.stop)
    assert _postgres_pids(data) == []


def test_embedded_redis_persists_across_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis").start()
    client = redis.Redis(port=server.port)
    client.set("k", "v")
    pid = server.process.pid  # type: ignore[union-attr]
    server.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    server = EmbeddedRedis(tmp_path / "redis").start()
    try:
        assert redis.Redis(port=server.port).get("k") == b"v"
    finally:
        server.stop()


def test_embedded_services_start_only_what_is_not_configured(tmp_path: Path) -> None:
    with embedded_services(tmp_path, database_url="postgresql+asyncpg://x@h/db",
                           redis_url=None) as (db, rd):  # fmt: skip
        assert db == "postgresql+asyncpg://x@h/db"
        assert rd is not None and rd.startswith("redis://127.0.0.1:")
        assert redis.Redis.from_url(rd).ping() is True
    assert not (tmp_path / "pgdata").exists()
    # Stopped with the context: nothing answers on that port any more.
    try:
        redis.Redis.from_url(rd, socket_connect_timeout=0.5).ping()
        raise AssertionError("redis still running")
    except redis.ConnectionError:
        pass
