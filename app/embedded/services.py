"""The servers an `htm` command runs on when no URLs are configured: the data directory's
embedded PostgreSQL and Redis, shared with every other `htm` process on that directory and
supervised while the command runs."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from app.embedded.postgres import EmbeddedPostgres
from app.embedded.shared_redis import SharedRedis
from app.embedded.supervisor import Supervisor, register, unregister

log = logging.getLogger(__name__)


@contextlib.contextmanager
def embedded_services(
    data_dir: Path, *, database_url: str | None, redis_url: str | None, redis: bool = True
) -> Iterator[tuple[str, str | None]]:
    """Start (or join) whatever is not configured; yield the URLs to use; leave at the end
    (the last process to leave a server stops it)."""
    pg: EmbeddedPostgres | None = None
    rd: SharedRedis | None = None
    supervisor = Supervisor()
    urls: list[str] = []
    try:
        if database_url is None:
            log.info("embedded PostgreSQL in %s", data_dir / "pgdata")
            pg = EmbeddedPostgres(data_dir / "pgdata", prune_dead_handles=True).start()
            database_url = pg.url()
            supervisor.watch("postgres", pg, f"{pg.data_dir}, socket in {pg.socket_dir}")
        if redis_url is None and redis:
            log.info("embedded Redis in %s", data_dir / "redis")
            rd = SharedRedis(data_dir / "redis").acquire()
            redis_url = rd.url
            supervisor.watch("redis", rd, f"{rd.data_dir}, port {rd.port}")
        for name, url in (("postgres", database_url), ("redis", redis_url)):
            if url is not None and name in supervisor.health:
                register(url, lambda name=name: supervisor.health[name])  # type: ignore[misc]
                urls.append(url)
        supervisor.start()
        yield database_url, redis_url
    finally:
        supervisor.stop()
        for url in urls:
            unregister(url)
        if rd is not None:
            rd.release()
        if pg is not None:
            pg.stop()
