"""`make chaos`: a bounded mixed load against the real service while faults are injected.

The service runs as its own process (`htm serve`) on an embedded PostgreSQL and an embedded
Redis (append-only file, fsync every second, as `make run` starts it), with an OpenAI-
compatible embedding provider played by a local HTTP server. Several clients add, PUT,
recall, read context and retrieve for a handful of robots. In turn, each fault is injected
while the load runs:

    redis_stall       Redis SIGSTOPped for the fault's duration, then SIGCONT
    redis_restart     Redis SIGKILLed, restarted on its port from its append-only file
    postgres_restart  PostgreSQL restarted (pg_ctl restart -m fast)
    embedder_down     the provider answers 503
    embedder_slow     the provider answers after longer than the service waits

Per fault it reports: requests, acknowledged writes, acknowledged writes missing afterwards
(must be 0), responses by status (no 500; 503 only while PostgreSQL is down), p99 latency
during the fault, and whether every robot's working memory agrees with its Postgres mirror
afterwards (app/working_memory/audit.py). Exit status 1 when any of that fails.

    python -m chaos [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from app.config import PROJECT_ROOT, Settings
from app.db.engine import create_engine
from app.db.session import create_sessionmaker
from app.embedded import EmbeddedPostgres, EmbeddedRedis
from app.working_memory.audit import audit
from app.working_memory.store import WorkingMemoryStore
from bench.http import Http
from bench.infra import ServiceProcess, admin
from tests.stubs import Recorded, StubServer

CHAOS_DIR = PROJECT_ROOT / ".htm" / "chaos"
RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
NAMESPACE = "default"  # auth is off: requests without X-Namespace land here
ROBOTS = [f"r{i}" for i in range(6)]
WORDS = "walrus tulip harbor orbit cedar lantern quartz meadow violet falcon ember".split()
DIM = 384
FAULTS = ("redis_stall", "redis_restart", "postgres_restart", "embedder_down", "embedder_slow")


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


# --- the embedding provider ------------------------------------------------------------------


def vector(text: str) -> list[float]:
    """A deterministic unit vector per text (similar texts are not similar: recall quality
    is not what this measures)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return (v / np.linalg.norm(v)).tolist()


class Provider:
    """The OpenAI-compatible provider, healthy, down (503) or slow."""

    def __init__(self) -> None:
        self.stub = StubServer()
        self.healthy()

    def healthy(self) -> None:
        self.stub.delay_s = 0.0

        def reply(req: Recorded) -> tuple[int, Any]:
            data = [{"index": i, "embedding": vector(t)} for i, t in enumerate(req.body["input"])]
            return 200, {"data": data, "model": "chaos-embed"}

        self.stub.reply = reply

    def down(self) -> None:
        self.stub.reply = lambda _req: (503, {"error": "provider down"})

    def slow(self, delay_s: float) -> None:
        self.stub.delay_s = delay_s


# --- the load ----------------------------------------------------------------------------------


@dataclass
class Sample:
    started: float
    seconds: float
    op: str
    status: int  # 0: no response (connection error, client timeout)


@dataclass
class Ledger:
    """What the service acknowledged: each must be there afterwards."""

    added: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (content, at)
    put: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # key -> [(content, at)]
    attempted_puts: dict[str, set[str]] = field(default_factory=dict)


class Load:
    def __init__(self, http: Http, ledger: Ledger, seed: int) -> None:
        self.http = http
        self.ledger = ledger
        self.rng = random.Random(seed)
        self.samples: list[Sample] = []
        self.counter = 0

    def _text(self, robot: str) -> str:
        self.counter += 1
        words = " ".join(self.rng.sample(WORDS, 3))
        return f"{robot} note {self.counter} about {words}"

    async def _one(self) -> None:
        robot = self.rng.choice(ROBOTS)
        base = f"/v1/robots/{robot}"
        roll = self.rng.random()
        body: dict[str, Any] | None = None
        key = None
        if roll < 0.25:
            op, method, path = "add", "POST", f"{base}/memories"
            key = f"a-{robot}-{self.counter}-{self.rng.randrange(10**9)}"
            body = {
                "key": key,
                "content": self._text(robot),
                "importance": self.rng.choice([1, 3, 5]),
            }
        elif roll < 0.40:
            op, method = "put", "PUT"
            key = f"p-{self.rng.randrange(12)}"
            path = f"{base}/memories/{key}"
            body = {"content": self._text(robot), "importance": self.rng.choice([1, 3, 5])}
            self.ledger.attempted_puts.setdefault(key, set()).add(body["content"])
        elif roll < 0.60:
            op, method, path = "recall", "POST", f"{base}/recall"
            strategy = self.rng.choice(["hybrid", "fulltext"])
            body = {"query": " ".join(self.rng.sample(WORDS, 2)), "strategy": strategy, "limit": 5}
        elif roll < 0.85:
            op, method = "context", "GET"
            path = f"{base}/context?strategy={self.rng.choice(['recent', 'important', 'balanced'])}"
        else:
            op, method = "retrieve", "GET"
            known = list(self.ledger.added)
            path = f"{base}/memories/{self.rng.choice(known) if known else 'p-0'}"
        started = time.monotonic()
        try:
            r = await self.http.request(method, path, json=body)
            status = r.status_code
        except Exception:
            status = 0
        self.samples.append(Sample(started, time.monotonic() - started, op, status))
        if op == "add" and status == 201 and key and body:
            self.ledger.added[key] = (body["content"], started)
        elif op == "put" and status in (200, 201) and key and body:
            self.ledger.put.setdefault(key, []).append((body["content"], started))

    async def client(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._one()


# --- faults ------------------------------------------------------------------------------------


@dataclass
class World:
    pg: EmbeddedPostgres
    redis: EmbeddedRedis
    provider: Provider
    service: ServiceProcess
    pg_down: list[tuple[float, float]] = field(default_factory=list)  # windows with 503 allowed

    def restart_postgres(self) -> None:
        self.pg.restart()

    async def inject(self, fault: str, seconds: float) -> None:
        if fault == "redis_stall":
            pid = self.redis.process.pid  # type: ignore[union-attr]
            os.kill(pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
        elif fault == "redis_restart":
            self.redis.process.kill()  # type: ignore[union-attr]
            self.redis.process.wait()  # type: ignore[union-attr]
            self.redis.process = None
            await asyncio.sleep(seconds / 2)
            await asyncio.to_thread(self.redis.start)
            await asyncio.sleep(seconds / 2)
        elif fault == "postgres_restart":
            down = time.monotonic()
            await asyncio.to_thread(self.restart_postgres)
            # 503 is allowed until the service's pool has reconnected.
            self.pg_down.append((down, time.monotonic() + 2.0))
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


# --- one fault's run and its report --------------------------------------------------------


@dataclass
class FaultReport:
    fault: str
    requests: int
    acknowledged_writes: int
    lost_writes: int
    statuses: dict[str, int]
    p99_ms_during: float
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
        )


async def settle(world: World, http: Http) -> None:
    """Let the repair worker and the embedding worker catch up after the load stopped."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = await http.get("/readyz")
        if r.status_code == 200:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(3.0)  # > the repair worker's interval + its stale-after


async def disagreements(database_url: str, redis_url: str) -> list[str]:
    import redis.asyncio as aioredis

    settings = Settings(_env_file=None, database_url=database_url, redis_url=redis_url)
    engine = create_engine(settings)
    client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        store = WorkingMemoryStore(client)
        problems = []
        async with create_sessionmaker(engine)() as session:
            for robot in ROBOTS:
                for p in await audit(
                    session, store, NAMESPACE, robot, settings.working_memory_budget
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
    fault: str, world: World, http: Http, ledger: Ledger, timing: Timing, seed: int, db_url: str
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
    await settle(world, http)
    acknowledged, missing = await lost_writes(http, ledger, started, ended)
    statuses = Counter(str(s.status) for s in load.samples)
    during = sorted(s.seconds for s in load.samples if fault_start <= s.started < fault_end)
    p99 = 1000 * during[min(len(during) - 1, int(0.99 * len(during)))] if during else 0.0

    def pg_window(s: Sample) -> bool:
        return any(a <= s.started + s.seconds and s.started <= b for a, b in world.pg_down)

    unexpected = sum(1 for s in load.samples if s.status == 503 and not pg_window(s))
    problems = await disagreements(db_url, world.redis.url)
    return FaultReport(
        fault=fault,
        requests=len(load.samples),
        acknowledged_writes=acknowledged,
        lost_writes=missing,
        statuses=dict(sorted(statuses.items())),
        p99_ms_during=round(p99, 1),
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
        "| 500s | 503 outside PG outage | WM = membership after |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in reports:
        statuses = ", ".join(f"{k}: {v}" for k, v in r.statuses.items())
        lines.append(
            f"| {r.fault} | {r.requests} | {r.acknowledged_writes} | {r.lost_writes} | "
            f"{statuses} | {r.p99_ms_during:.0f} | {r.server_errors} | {r.unexpected_503} | "
            f"{'yes' if r.agree_after else 'NO'} |"
        )
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> int:
    timing = QUICK if args.quick else FULL
    data = CHAOS_DIR / ("quick" if args.quick else "full")
    pg = redis = provider = service = None
    try:
        say(f"chaos: starting PostgreSQL, Redis and the provider under {data}")
        pg = await asyncio.to_thread(EmbeddedPostgres(data / "pgdata", database="postgres").start)
        await admin(pg.url("postgres"), 'DROP DATABASE IF EXISTS "chaos" WITH (FORCE)')
        await admin(pg.url("postgres"), 'CREATE DATABASE "chaos"')
        db_url = pg.url("chaos")
        from app.db.migrate import upgrade

        await asyncio.to_thread(upgrade, db_url)
        shutil.rmtree(data / "redis", ignore_errors=True)  # no working memory from a past run
        redis = EmbeddedRedis(data / "redis", persistent=True)
        redis.start()
        provider = Provider()
        provider.stub.start()
        service = ServiceProcess(
            db_url,
            redis.url,
            data / "service.log",
            embedding_provider="openai",
            embedding_model="chaos-embed",
            embedding_url=provider.stub.url,
            embedding_timeout_s="1",
            embedding_worker_interval_s="0.5",
            redis_timeout_s="0.5",
            redis_retry_after_s="0.5",
            working_memory_repair_interval_s="0.5",
            db_pool_size="10",
        )
        await service.start()
        world = World(pg, redis, provider, service)
        ledger = Ledger()
        faults = args.faults.split(",") if args.faults else list(FAULTS)
        reports = []
        async with Http(service.base_url, connections=timing.clients + 4, timeout_s=30) as http:
            for i, fault in enumerate(faults):
                say(f"chaos: {fault} ({timing.fault_s:g} s under load)")
                report = await run_fault(fault, world, http, ledger, timing, args.seed + i, db_url)
                say(
                    f"  {report.requests} requests, {report.acknowledged_writes} acknowledged "
                    f"writes, {report.lost_writes} missing, statuses {report.statuses}, "
                    f"agree after: {report.agree_after}"
                )
                for p in report.problems:
                    say(f"    {p}")
                reports.append(report)
        md = table(reports)
        print(md)
        machine = f"{os.cpu_count()} cores, {os.uname().machine}"
        result = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine,
            "quick": args.quick,
            "timing": timing.__dict__,
            "versions": service.readyz,
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
            redis.stop()
        if pg is not None:
            pg.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter phases, fewer clients (CI)")
    p.add_argument("--faults", help=f"comma-separated subset of {','.join(FAULTS)}")
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
