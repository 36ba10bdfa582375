"""`make chaos`: a bounded mixed load against the real service while faults are injected.

The service runs as `make run` runs it: `htm serve` on a data directory (.htm/chaos/) whose
embedded PostgreSQL and Redis (append-only file, fsync every second) it shares with this
harness and supervises, with an OpenAI-compatible embedding provider played by a local HTTP
server. Several clients add, PUT, recall, read context and retrieve for a handful of robots.
In turn, each fault is injected while the load runs:

    redis_stall       Redis SIGSTOPped for the fault's duration, then SIGCONT
    redis_restart     Redis SIGKILLed, restarted by hand on its port from its append-only
                      file half the fault later (the supervisor waits on the directory's lock)
    redis_kill        Redis SIGKILLed; the service's supervisor starts it again
    postgres_restart  PostgreSQL restarted (pg_ctl restart -m fast)
    postgres_kill     the postmaster SIGKILLed; the service's supervisor starts it again
    embedder_down     the provider answers 503
    embedder_slow     the provider answers after longer than the service waits
    redis_cluster_failover
                      on a second service, using a Redis Cluster of 3 masters with 1 replica
                      each: a master SIGKILLed, its replica promoted (chaos/cluster.py)
    citus_worker_stop on a third service, over a Citus coordinator and 2 workers: a worker
                      stopped, then started (chaos/citus.py; skipped, no row, without Citus)

Per fault it reports: requests, acknowledged writes, acknowledged writes missing afterwards
(must be 0), responses by status (no 500; 503 only while PostgreSQL is down), p99 latency
during the fault, for a killed server the seconds until the service was back (adds placed in
working memory again after Redis, adds answered 201 again after PostgreSQL), and whether every
robot's working memory agrees with its Postgres mirror afterwards (app/working_memory/audit.py).
Exit status 1 when any of that fails, or a killed server never came back.

    python -m chaos [--quick] [--faults a,b] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from app.config import PROJECT_ROOT, Settings
from app.db.engine import create_engine
from app.db.session import create_sessionmaker
from app.embedded import EmbeddedPostgres, SharedRedis
from app.working_memory.audit import audit
from app.working_memory.store import WorkingMemoryStore
from bench.http import Http
from bench.infra import ServiceProcess, admin
from chaos.citus import CITUS_BACK, CITUS_FAULTS, citus_worker_stop
from chaos.cluster import CLUSTER_BACK, CLUSTER_FAULTS, ClusterWorld, start_nodes
from chaos.load import NAMESPACE, ROBOTS, Ledger, Load, Provider, Sample
from chaos.world import BACK, FAULTS, World

CHAOS_DIR = PROJECT_ROOT / ".htm" / "chaos"
# The faults after which the service must come back by itself.
RECOVERS = {**BACK, **CLUSTER_BACK, **CITUS_BACK}
RESULTS_DIR = PROJECT_ROOT / "bench" / "results"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Timing:
    before_s: float
    fault_s: float
    after_s: float
    clients: int


FULL = Timing(before_s=3.0, fault_s=5.0, after_s=4.0, clients=8)
QUICK = Timing(before_s=1.0, fault_s=3.0, after_s=2.0, clients=4)


# --- one fault's run and its report --------------------------------------------------------


@dataclass
class FaultReport:
    fault: str
    requests: int
    acknowledged_writes: int
    lost_writes: int
    statuses: dict[str, int]
    p99_ms_during: float
    back_after_s: float | None  # a killed server: until adds placed (Redis) / 201 (PG) again
    server_errors: int
    unexpected_503: int
    agree_after: bool
    problems: list[str]

    @property
    def ok(self) -> bool:
        return (
            self.lost_writes == 0
            and self.server_errors == 0
            and self.unexpected_503 == 0
            and self.agree_after
            and (self.fault not in RECOVERS or self.back_after_s is not None)
        )


async def settle(http: Http) -> None:
    """Let the repair worker and the embedding worker catch up after the load stopped."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = await http.get("/readyz")
        if r.status_code == 200:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(3.0)  # > the repair worker's interval + its stale-after


async def disagreements(database_url: str, redis_url: str, cluster: bool) -> list[str]:
    settings = Settings(_env_file=None, database_url=database_url, redis_url=redis_url)
    engine = create_engine(settings)
    client: aioredis.Redis | RedisCluster
    if cluster:
        client = RedisCluster.from_url(redis_url, decode_responses=True)
    else:
        client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        store = WorkingMemoryStore(client)
        problems = []
        async with create_sessionmaker(engine)() as session:
            for robot in ROBOTS:
                for p in await audit(
                    session,
                    store,
                    NAMESPACE,
                    robot=robot,
                    default_budget=settings.working_memory_budget,
                ):
                    problems.append(f"{robot}: {p}")
        return problems
    finally:
        await client.aclose()
        await engine.dispose()


async def lost_writes(http: Http, ledger: Ledger, since: float, until: float) -> tuple[int, int]:
    """(acknowledged, missing) among writes acknowledged in [since, until)."""
    acknowledged = missing = 0
    for key, (content, at) in ledger.added.items():
        if since <= at < until:
            acknowledged += 1
            r = await http.get(f"/v1/robots/r0/memories/{key}")
            if r.status_code != 200 or r.json()["content"] != content:
                missing += 1
    for key, writes in ledger.put.items():
        for _content, at in writes:
            if since <= at < until:
                acknowledged += 1
                r = await http.get(f"/v1/robots/r0/memories/{key}")
                # The key holds one of the contents PUT to it (a later PUT may have won).
                if r.status_code != 200 or r.json()["content"] not in ledger.attempted_puts[key]:
                    missing += 1
    return acknowledged, missing


async def run_fault(
    fault: str,
    world: World | ClusterWorld,
    http: Http,
    ledger: Ledger,
    timing: Timing,
    seed: int,
    db_url: str,
) -> FaultReport:
    load = Load(http, ledger, seed)
    stop = asyncio.Event()
    started = time.monotonic()
    clients = [asyncio.create_task(load.client(stop)) for _ in range(timing.clients)]
    try:
        await asyncio.sleep(timing.before_s)
        fault_start = time.monotonic()
        await world.inject(fault, timing.fault_s)
        fault_end = time.monotonic()
        await asyncio.sleep(timing.after_s)
    finally:
        stop.set()
        await asyncio.gather(*clients, return_exceptions=True)
    ended = time.monotonic()
    back = world.recovery(fault, load.samples)
    await settle(http)
    acknowledged, missing = await lost_writes(http, ledger, started, ended)
    statuses = Counter(str(s.status) for s in load.samples)
    during = sorted(s.seconds for s in load.samples if fault_start <= s.started < fault_end)
    p99 = 1000 * during[min(len(during) - 1, int(0.99 * len(during)))] if during else 0.0

    def pg_window(s: Sample) -> bool:
        return any(a <= s.ended and s.started <= b for a, b in world.pg_down)

    unexpected = sum(1 for s in load.samples if s.status == 503 and not pg_window(s))
    problems = await disagreements(db_url, world.redis_url, world.cluster)
    return FaultReport(
        fault=fault,
        requests=len(load.samples),
        acknowledged_writes=acknowledged,
        lost_writes=missing,
        statuses=dict(sorted(statuses.items())),
        p99_ms_during=round(p99, 1),
        back_after_s=back,
        server_errors=sum(
            n for code, n in statuses.items() if code.startswith("5") and code != "503"
        ),
        unexpected_503=unexpected,
        agree_after=not problems,
        problems=problems[:20],
    )


def table(reports: list[FaultReport]) -> str:
    lines = [
        "| fault | requests | acknowledged writes | missing after | statuses | p99 ms during "
        "| back after s | 500s | 503 outside PG outage | WM = membership after |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in reports:
        statuses = ", ".join(f"{k}: {v}" for k, v in r.statuses.items())
        back = (
            "" if r.fault not in RECOVERS else "never" if r.back_after_s is None else r.back_after_s
        )
        lines.append(
            f"| {r.fault} | {r.requests} | {r.acknowledged_writes} | {r.lost_writes} | "
            f"{statuses} | {r.p99_ms_during:.0f} | {back} | {r.server_errors} | "
            f"{r.unexpected_503} | {'yes' if r.agree_after else 'NO'} |"
        )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


def embedded_service(data: Path, **settings: str) -> ServiceProcess:
    """`htm serve` without URLs, on `data`: it joins the servers this harness holds there
    and supervises them, as `make run` does."""
    service = ServiceProcess("", "", data / "service.log", **settings)
    del service.env["HTM_DATABASE_URL"], service.env["HTM_REDIS_URL"]
    service.env["HTM_DATA_DIR"] = str(data)
    return service


SERVICE_SETTINGS = {
    "embedding_provider": "openai",
    "embedding_model": "chaos-embed",
    "embedding_timeout_s": "1",
    "embedding_worker_interval_s": "0.5",
    "redis_timeout_s": "0.5",
    "redis_retry_after_s": "0.5",
    "working_memory_repair_interval_s": "0.5",
    "db_pool_size": "10",
}


async def run_faults(
    faults: list[str], world: World | ClusterWorld, timing: Timing, seed: int, db_url: str
) -> list[FaultReport]:
    ledger = Ledger()
    reports = []
    url = world.service.base_url
    async with Http(url, connections=timing.clients + 4, timeout_s=30) as http:
        for i, fault in enumerate(faults):
            say(f"chaos: {fault} ({timing.fault_s:g} s under load)")
            report = await run_fault(fault, world, http, ledger, timing, seed + i, db_url)
            back = report.back_after_s
            back_s = "" if back is None else f", back after {back} s"
            say(
                f"  {report.requests} requests, {report.acknowledged_writes} acknowledged "
                f"writes, {report.lost_writes} missing, statuses {report.statuses}, "
                f"agree after: {report.agree_after}{back_s}"
            )
            for p in report.problems:
                say(f"    {p}")
            reports.append(report)
    return reports


async def cluster_faults(
    faults: list[str],
    data: Path,
    pg: EmbeddedPostgres,
    provider: Provider,
    timing: Timing,
    seed: int,
) -> list[FaultReport]:
    """The cluster rows: a cluster of 3 masters with 1 replica each and a service of its own
    on it, with a database of its own."""
    await admin(pg.url("postgres"), 'DROP DATABASE IF EXISTS "htm_cluster" WITH (FORCE)')
    await admin(pg.url("postgres"), 'CREATE DATABASE "htm_cluster"')
    db_url = pg.url("htm_cluster")
    from app.db.migrate import upgrade

    await asyncio.to_thread(upgrade, db_url)
    where = data / "cluster"
    if where.exists():
        shutil.rmtree(where)  # no nodes.conf or working memory from a past run
    say(f"chaos: starting a Redis Cluster (3 masters, 1 replica each) under {where}")
    nodes = await asyncio.to_thread(start_nodes, where)
    service = None
    try:
        victim = ClusterWorld.choose_victim(nodes)
        entry = next(n for n in nodes if n is not victim)
        service = ServiceProcess(
            db_url,
            entry.url,
            where / "service.log",
            redis_cluster="true",
            embedding_url=provider.stub.url,
            **SERVICE_SETTINGS,
        )
        service.env["HTM_DATA_DIR"] = str(where / "service")
        await service.start()
        world = ClusterWorld(nodes, provider, service, victim)
        reports = await run_faults(faults, world, timing, seed, db_url)
        say(
            f"  a replica served the killed master's slots {world.promoted_after_s} s after "
            f"the kill; the old master was a replica again after {world.rejoined_after_s} s"
        )
        return reports
    finally:
        if service is not None:
            service.stop()
        for node in nodes:
            node.stop()


async def main(args: argparse.Namespace) -> int:
    timing = QUICK if args.quick else FULL
    data = CHAOS_DIR / ("quick" if args.quick else "full")
    faults = args.faults.split(",") if args.faults else [*FAULTS, *CLUSTER_FAULTS, *CITUS_FAULTS]
    unknown = sorted(set(faults) - set(FAULTS) - set(CLUSTER_FAULTS) - set(CITUS_FAULTS))
    if unknown:
        say(f"chaos: no such fault: {', '.join(unknown)}")
        return 2
    pg = redis = provider = service = None
    try:
        say(f"chaos: starting PostgreSQL, Redis and the provider under {data}")
        pg = EmbeddedPostgres(data / "pgdata", database="postgres", prune_dead_handles=True)
        await asyncio.to_thread(pg.start)
        provider = Provider()
        provider.stub.start()
        reports: list[FaultReport] = []
        single = [f for f in faults if f in FAULTS]
        if single:
            # The service's database (htm serve's embedded default), new for each run.
            await admin(pg.url("postgres"), 'DROP DATABASE IF EXISTS "htm" WITH (FORCE)')
            await admin(pg.url("postgres"), 'CREATE DATABASE "htm"')
            db_url = pg.url("htm")
            from app.db.migrate import upgrade

            await asyncio.to_thread(upgrade, db_url)
            redis = await asyncio.to_thread(SharedRedis(data / "redis").acquire)
            async with aioredis.from_url(redis.url) as r:
                await r.flushall()  # no working memory from a past run
            service = embedded_service(data, embedding_url=provider.stub.url, **SERVICE_SETTINGS)
            await service.start()
            world = World(pg, redis, provider, service)
            reports += await run_faults(single, world, timing, args.seed, db_url)
            versions = service.readyz
            service.stop()
            service = None
        on_cluster = [f for f in faults if f in CLUSTER_FAULTS]
        if on_cluster:
            seed = args.seed + len(single)
            reports += await cluster_faults(on_cluster, data, pg, provider, timing, seed)
        if "citus_worker_stop" in faults:
            got = await citus_worker_stop(
                timing.before_s, timing.fault_s, timing.after_s, timing.clients, args.seed
            )
            if got is not None:
                reports.append(FaultReport(**got))
                say(f"  {got['requests']} requests, statuses {got['statuses']}")
        md = table(reports)
        print(md)
        machine = f"{os.cpu_count()} cores, {os.uname().machine}"
        result = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine,
            "quick": args.quick,
            "timing": timing.__dict__,
            "versions": versions if single else None,
            "reports": [{**r.__dict__, "ok": r.ok} for r in reports],
        }
        args.out.mkdir(parents=True, exist_ok=True)
        name = "chaos-quick" if args.quick else "chaos-latest"
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / f"{name}.md").write_text(
            f"# make chaos{' --quick' if args.quick else ''}: {result['when']}, {machine}\n\n{md}\n"
        )
        failed = [r.fault for r in reports if not r.ok]
        if failed:
            say(f"chaos: FAILED under {', '.join(failed)}; see {data / 'service.log'}")
            return 1
        say("chaos: every fault passed")
        return 0
    finally:
        if service is not None:
            service.stop()
        if provider is not None:
            provider.stub.stop()
        if redis is not None:
            redis.release()
        if pg is not None:
            pg.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter phases, fewer clients (CI)")
    every = ",".join((*FAULTS, *CLUSTER_FAULTS, *CITUS_FAULTS))
    p.add_argument("--faults", help=f"comma-separated subset of {every}")
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
