"""Throughput with 1, 2 and 3 service processes on one PostgreSQL and one Redis (issue 36).

`python -m bench.processes` (defaults: N = 10,000 memories, 16 concurrent clients, 20 s per
phase): loads N memories (bench/dataset's scale memories, client-supplied vectors) into a
fresh database through one service process, then for P = 1, 2, 3 starts `htm serve
--workers P` on the same database and Redis and measures, at the same concurrency:

- recall: POST …/recall, vector strategy, limit 10, hits loaded into working memory (each
  client its own robot), the agents' dominant request;
- add: POST …/memories, one new memory with its vector.

The floor is the same work sent raw from this process (bench/floor.py: the service's own
statements with asyncpg, its Lua scripts with redis-py) at the same concurrency, measured
in the same run; figures are requests per second and the ratio to that floor. Writes
bench/results/<date>-processes.md and .json.

On a 2-core machine every process competes with PostgreSQL for the same cores, so this
shows where one machine saturates, not how a fleet of machines scales (docs/SCALING.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from app.tokens import Tokenizer
from bench import dataset
from bench.base import check_status, vec_json, vec_list
from bench.driver import Limits, closed_loop
from bench.floor import AddItem, Floor, RecallSpec
from bench.http import Http
from bench.infra import (
    BENCH_DIR,
    ChildServer,
    Servers,
    ServiceProcess,
    drop_database,
    floor_pool,
    fresh_database,
)

NAMESPACE = "default"
DATABASE = "htm_bench_processes"
RESULTS = Path(__file__).parent / "results"
BATCH = 500
JSON = {"content-type": "application/json"}


class Workers(ServiceProcess):
    """`htm serve --workers P` as one child (its supervisor and P worker processes)."""

    def __init__(self, processes: int, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.processes = processes

    def spawn(self) -> None:
        args = [sys.executable, "-m", "app.cli", "serve", "--no-migrate"]
        args += ["--host", "127.0.0.1", "--port", str(self.port)]
        args += ["--workers", str(self.processes)]
        ChildServer._spawn(self, args, self.env, Path(__file__).parent.parent)


async def load(url: str, n: int, seed: int) -> float:
    """N memories through POST …/memories/batch from 6 robots; returns seconds taken."""
    mem = dataset.scale_memories(seed, n)
    t0 = time.perf_counter()
    async with Http(url, 4) as c:
        for start in range(0, n, BATCH):
            items = []
            for i in range(start, min(n, start + BATCH)):
                items.append(
                    f'{{"key":"k{i:07d}","content":{json.dumps(mem.contents[i])},'
                    f'"created_at":"{mem.created_at[i].isoformat()}",'
                    f'"embedding":{vec_json(mem.vectors[i])}}}'
                )
            body = f'{{"memories":[{",".join(items)}]}}'.encode()
            robot = f"scribe-{(start // BATCH) % 6}"
            r = await c.post(f"/v1/robots/{robot}/memories/batch", content=body, headers=JSON)
            check_status(r, 201)
    return time.perf_counter() - t0


def phase_figures(result: Any) -> dict[str, Any]:
    return {
        "requests": result.requests,
        "errors": result.errors,
        "req_per_s": round(result.throughput, 1),
        "p50_ms": round(result.p50_ms, 2) if result.p50_ms else None,
        "p99_ms": round(result.p99_ms, 2) if result.p99_ms else None,
        "first_error": result.first_error,
    }


async def run(n: int, concurrency: int, seconds: float, seed: int) -> dict[str, Any]:
    servers = Servers.start()
    out: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
    }
    try:
        url = await fresh_database(servers, DATABASE)
        loader = await ServiceProcess(
            url, servers.redis_url, BENCH_DIR / "logs" / "processes-load.log",
            embedding_provider="none",
        ).start()  # fmt: skip
        try:
            out["load_s"] = round(await load(loader.base_url, n, seed), 1)
        finally:
            loader.stop()
        pool = await floor_pool(url, concurrency)
        async with pool.acquire() as conn:
            await conn.execute("VACUUM ANALYZE")
            ns_id = await conn.fetchval("SELECT id FROM namespace WHERE name = $1", NAMESPACE)
        redis = aioredis.from_url(servers.redis_url, decode_responses=True)
        floor = Floor(pool, redis, NAMESPACE, ns_id, 128_000)
        qs = dataset.scale_questions(seed, 200)
        fresh = dataset.fresh_vectors(seed, 20_000, 1)
        tokenizer = Tokenizer.load("cl100k_base")
        limits = Limits(max_requests=1_000_000, max_seconds=seconds, warmup=concurrency * 2)
        specs = [
            RecallSpec("vector", qs.texts[i], vec_list(qs.vectors[i]), False, None, None, 10, True)
            for i in range(len(qs.texts))
        ]
        bodies = [
            json.dumps({"query": qs.texts[i], "strategy": "vector", "limit": 10})[:-1].encode()
            + f',"embedding":{vec_json(qs.vectors[i])}}}'.encode()
            for i in range(len(qs.texts))
        ]

        def add_item(i: int, prefix: str) -> AddItem:
            content = f"{prefix} note {i}: {qs.texts[i % len(qs.texts)]}"
            return AddItem(content, tokenizer.count(content), vec_list(fresh[i % len(fresh)]))

        def add_body(i: int, prefix: str) -> bytes:
            item = add_item(i, prefix)
            return (
                f'{{"key":"{prefix}-{i}","content":{json.dumps(item.content)},'
                f'"embedding":{vec_json(fresh[i % len(fresh)])}}}'
            ).encode()

        async def floor_recall(w: int, i: int) -> None:
            await floor.recall(f"floor-{w}", specs[i % len(specs)])

        async def floor_add(w: int, i: int) -> None:
            await floor.add(f"floor-w{w}", [add_item(i, "floor")])

        out["floor"] = {
            "recall": phase_figures(await closed_loop(floor_recall, concurrency, limits)),
            "add": phase_figures(await closed_loop(floor_add, concurrency, limits)),
        }
        await floor.aclose()
        out["service"] = {}
        for processes in (1, 2, 3):
            service = await Workers(
                processes, url, servers.redis_url,
                BENCH_DIR / "logs" / f"processes-{processes}.log", embedding_provider="none",
            ).start()  # fmt: skip
            try:
                async with Http(service.base_url, concurrency) as c:

                    async def recall(w: int, i: int, c: Http = c) -> None:
                        r = await c.post(
                            f"/v1/robots/reader-{w}/recall",
                            content=bodies[i % len(bodies)],
                            headers=JSON,
                        )
                        check_status(r, 200)

                    async def add(w: int, i: int, c: Http = c, p: int = processes) -> None:
                        r = await c.post(
                            f"/v1/robots/writer-{w}/memories",
                            content=add_body(i, f"p{p}"),
                            headers=JSON,
                        )
                        check_status(r, 201)

                    out["service"][processes] = {
                        "recall": phase_figures(await closed_loop(recall, concurrency, limits)),
                        "add": phase_figures(await closed_loop(add, concurrency, limits)),
                    }
            finally:
                service.stop()
            print(f"P={processes}: {out['service'][processes]}", file=sys.stderr)
        await redis.aclose()
        await pool.close()
        await drop_database(servers, DATABASE)
    finally:
        servers.stop()
    return out


def report(out: dict[str, Any]) -> str:
    lines = [
        f"# Throughput with 1, 2 and 3 service processes ({out['date']}, {out['machine']})",
        "",
        f"`python -m bench.processes`: N = {out['n']:,} memories, {out['concurrency']} "
        f"concurrent clients, {out['seconds']:g} s per phase, `htm serve --workers P` on one "
        "embedded PostgreSQL 18 + pgvector and one Redis. Floor: the same work sent raw "
        "(bench/floor.py) at the same concurrency, in the same run.",
        "",
        "| operation | floor req/s | P=1 req/s (× floor) | P=2 | P=3 | p99 ms P=1 / 2 / 3 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for op in ("recall", "add"):
        floor = out["floor"][op]["req_per_s"]
        cells = []
        for p in (1, 2, 3):
            s = out["service"][p][op]
            cells.append(f"{s['req_per_s']:,.0f} ({s['req_per_s'] / floor:.2f}×)")
        p99 = " / ".join(f"{out['service'][p][op]['p99_ms']:.0f}" for p in (1, 2, 3))
        lines.append(f"| {op} | {floor:,.0f} | {' | '.join(cells)} | {p99} |")
    errors = sum(out["service"][p][op]["errors"] for p in (1, 2, 3) for op in ("recall", "add"))
    lines += ["", f"Errors: {errors}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    out = asyncio.run(run(args.n, args.concurrency, args.seconds, args.seed))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{out['date']}-processes"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=2) + "\n")
    stem.with_suffix(".md").write_text(report(out))
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
