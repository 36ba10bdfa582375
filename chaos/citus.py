"""The Citus row of `make chaos` (issue 50, item 3): a worker stopped under load.

    citus_worker_stop  on a service of its own over a Citus coordinator and two workers
                       (bench/citus_cluster.py), one worker stopped (`immediate`) for the
                       fault's duration, then started again

The load is bench/citus.py's: clients adding then recalling (client vectors), half of them
on namespaces whose shard the stopped worker holds, half on the others. What must hold: no
500; 503 only for a namespace of the stopped worker while it is down (a request that overlaps
the outage); every acknowledged add there afterwards; adds in those namespaces answered 201
again once the worker is back (`back after s`); each robot's working memory agreeing with its
mirror afterwards. Citus ships in no registry this project installs from: where the embedded
binaries do not carry it the fault is skipped, saying so, and makes no row (CI).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app.embedded import EmbeddedRedis
from bench import citus_cluster
from bench.citus import Traffic, load, warm, worker_of
from bench.infra import ServiceProcess
from bench.replica import vectors
from chaos.load import Sample

CITUS_FAULTS = ("citus_worker_stop",)
# Back: an add in a namespace of the stopped worker answered 201 again (its seconds after the
# worker was started are measured here, not from chaos.load's samples).
CITUS_BACK: dict[str, Callable[[Sample], bool]] = {"citus_worker_stop": lambda s: s.status == 201}
NAMESPACES = [f"citus{i:02d}" for i in range(8)]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _agree(url: str, redis_url: str) -> list[str]:
    """What each namespace's traffic robot's working memory disagrees on with its mirror."""
    import redis.asyncio as aioredis

    from app.config import Settings
    from app.db.engine import create_engine
    from app.db.session import create_sessionmaker
    from app.working_memory.audit import audit
    from app.working_memory.store import WorkingMemoryStore

    settings = Settings(_env_file=None, database_url=url, redis_url=redis_url)
    engine = create_engine(settings)
    client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        problems = []
        async with create_sessionmaker(engine)() as session:
            for ns in NAMESPACES:
                found = await audit(
                    session,
                    WorkingMemoryStore(client),
                    ns,
                    robot="traffic",
                    default_budget=settings.working_memory_budget,
                )
                problems += [f"{ns}/traffic: {p}" for p in found]
        return problems
    finally:
        await client.aclose()
        await engine.dispose()


async def citus_worker_stop(
    before_s: float, fault_s: float, after_s: float, clients: int, seed: int
) -> dict[str, Any] | None:
    """The fault's figures (FaultReport's fields), or None where Citus is not installed."""
    version = citus_cluster.available()
    if version is None:
        say("chaos: citus_worker_stop skipped: the embedded PostgreSQL has no Citus")
        return None
    base = Path(tempfile.mkdtemp(prefix="htm-chaos-citus-"))
    redis = EmbeddedRedis(base / "redis", persistent=False).start()
    cluster = await asyncio.to_thread(citus_cluster.make_cluster, base / "citus", 2)
    service = None
    try:
        from app.db.migrate import upgrade

        say(f"chaos: citus_worker_stop on Citus {version}, a coordinator and 2 workers")
        url = await cluster.database("htm_chaos")
        await asyncio.to_thread(upgrade, url)
        service = ServiceProcess(
            url,
            redis.url,
            base / "service.log",
            embedding_provider="none",
            working_memory_repair_interval_s="0.5",
        )
        await service.start()
        await load(service.base_url, NAMESPACES, 20, seed)
        await warm(service.base_url, NAMESPACES)
        import asyncpg

        from bench.citus import _pg

        conn = await asyncpg.connect(**_pg(url))
        try:
            ports = await worker_of(conn, NAMESPACES)
        finally:
            await conn.close()
        stopped = cluster.workers[1]
        lost = [ns for ns in NAMESPACES if ports[ns] == stopped.port]
        kept = [ns for ns in NAMESPACES if ports[ns] != stopped.port]
        if not lost or not kept:
            raise RuntimeError(f"the namespaces are all on one worker: {ports}")
        queries = vectors(np.random.default_rng(seed), 100)
        half = max(1, clients // 2)
        async with Traffic(service.base_url, [kept] * half + [lost] * half, queries) as traffic:
            await asyncio.sleep(before_s)
            down = time.monotonic()
            await asyncio.to_thread(stopped.stop, "immediate")
            await asyncio.sleep(fault_s)
            await asyncio.to_thread(stopped.start)
            up = time.monotonic()
            await asyncio.sleep(after_s)
        writes = await traffic.lost(url)
        await asyncio.sleep(2.0)  # the repair worker's interval, and then some
        problems = await _agree(url, redis.url)
    finally:
        if service is not None:
            service.stop()
        redis.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    statuses = Counter(str(status) for _, _, _, status, _ in traffic.answers)
    during = sorted(dt for t, _, _, _, dt in traffic.answers if down <= t < up)
    p99 = 1000 * during[min(len(during) - 1, int(0.99 * len(during)))] if during else 0.0

    back = [
        t - up
        for t, ns, kind, status, _ in traffic.answers
        if ns in lost and kind == "add" and status == 201 and t >= up
    ]
    # The outage of the stopped worker's namespaces: from its stop until their first add
    # answered 201 again (Citus reconnects to the worker as it comes up).
    until = up + (min(back) if back else float("inf"))

    def outage(ns: str, t: float, dt: float) -> bool:  # overlaps the outage
        return ns in lost and t <= until and down <= t + dt

    unexpected = sum(
        1 for t, ns, _, status, dt in traffic.answers if status == 503 and not outage(ns, t, dt)
    )
    return {
        "fault": "citus_worker_stop",
        "requests": len(traffic.answers),
        "acknowledged_writes": writes["acknowledged"],
        "lost_writes": writes["lost"],
        "statuses": dict(sorted(statuses.items())),
        "p99_ms_during": round(p99, 1),
        "back_after_s": round(min(back), 2) if back else None,
        "server_errors": sum(n for c, n in statuses.items() if c.startswith("5") and c != "503")
        + statuses.get("0", 0),
        "unexpected_503": unexpected,
        "agree_after": not problems,
        "problems": problems[:20],
    }
