"""`make chaos`'s faults, injected into the servers of a service run as `make run` runs it:
`htm serve` on a data directory's embedded PostgreSQL and Redis, which it shares with this
harness (each holds handles) and supervises (app/embedded)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.embedded import EmbeddedPostgres, SharedRedis
from bench.infra import ServiceProcess
from chaos.load import Provider, Sample

FAULTS = (
    "redis_stall",
    "redis_restart",
    "redis_kill",
    "postgres_restart",
    "postgres_kill",
    "embedder_down",
    "embedder_slow",
)
# The faults after which the service must come back by itself, and what "back" means for
# them: an add placed in working memory again (Redis), an add answered 201 again (PostgreSQL).
BACK: dict[str, Callable[[Sample], bool]] = {
    "redis_kill": lambda s: s.status == 201 and s.placed is True,
    "postgres_kill": lambda s: s.status == 201,
}


def back_after(samples: list[Sample], since: float, back: Callable[[Sample], bool]) -> float | None:
    """Seconds from `since` to the end of the first add that was `back`, among those started
    after the last one that was not (None if none was back)."""
    adds = sorted(
        (s for s in samples if s.op == "add" and s.started >= since), key=lambda s: s.started
    )
    failed = [s.started for s in adds if not back(s)]
    after = [s for s in adds if back(s) and (not failed or s.started > failed[-1])]
    return round(min(s.ended for s in after) - since, 2) if after else None


@dataclass
class World:
    pg: EmbeddedPostgres
    redis: SharedRedis
    provider: Provider
    service: ServiceProcess
    pg_down: list[tuple[float, float]] = field(default_factory=list)  # windows with 503 allowed
    struck: dict[str, float] = field(default_factory=dict)  # fault -> when the server was killed
    cluster = False

    @property
    def redis_url(self) -> str:
        return self.redis.url

    def redis_pid(self) -> int:
        server = self.redis.server()
        assert server is not None, "no redis-server runs in the data directory"
        return server.pid

    def postmaster_pid(self) -> int:
        postmaster = self.pg.postmaster
        assert postmaster is not None and postmaster.running, "no postmaster runs"
        return postmaster.pid

    async def inject(self, fault: str, seconds: float) -> None:
        if fault == "redis_stall":
            pid = self.redis_pid()
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
        elif fault == "redis_restart":
            # By hand, down half the fault: under the directory's lock, so the service's
            # supervisor waits and then finds this server running.
            await asyncio.to_thread(self.redis.kill_and_restart, seconds / 2)
            await asyncio.sleep(seconds / 2)
        elif fault == "redis_kill":
            self.struck[fault] = time.monotonic()
            os.kill(self.redis_pid(), signal.SIGKILL)  # the service's supervisor restarts it
            await asyncio.sleep(seconds)
        elif fault == "postgres_restart":
            down = time.monotonic()
            await asyncio.to_thread(self.pg.restart)
            # 503 is allowed until the service's pool has reconnected.
            self.pg_down.append((down, time.monotonic() + 2.0))
            await asyncio.sleep(seconds)
        elif fault == "postgres_kill":
            self.struck[fault] = time.monotonic()
            os.kill(self.postmaster_pid(), signal.SIGKILL)  # the supervisor restarts it
            await asyncio.sleep(seconds)
        elif fault == "embedder_down":
            self.provider.down()
            await asyncio.sleep(seconds)
            self.provider.healthy()
        elif fault == "embedder_slow":
            self.provider.slow(3.0)
            await asyncio.sleep(seconds)
            self.provider.healthy()
        else:
            raise ValueError(fault)

    def recovery(self, fault: str, samples: list[Sample]) -> float | None:
        """For a killed server: seconds until the service was back (None for other faults).
        A killed PostgreSQL's outage, until then and 1 s more, allows 503s."""
        if fault not in BACK:
            return None
        struck = self.struck[fault]
        seconds = back_after(samples, struck, BACK[fault])
        if fault == "postgres_kill":
            self.pg_down.append((struck, struck + (seconds or 0.0) + 1.0))
        return seconds
