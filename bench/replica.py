"""`python -m bench.replica [--n 10000] [--concurrency 8] [--seconds 10] [--rounds 2]`:
recall at c=K with and without a read replica (HTM_DATABASE_REPLICA_URLS), beside a raw-SQL
floor measured in the same run.

A primary and its streaming replica of their own (bench/replica_pair.py, the embedded
binaries) and a Redis; N memories with random 384-dimension vectors added through the API
(batches of 200, ten authors), then VACUUM ANALYZE and the replica caught up. Phases, each
a closed loop of K clients (bench/driver.py): the floor (asyncpg, the HNSW search of the
10 nearest, with the service's session settings) on the primary and on the replica; `htm
serve` without replicas and `htm serve` with the replica, alternated for --rounds. Recall is
a vector recall with the question's vector sent (`embedding`), 10 hits, loaded into working
memory (the default): the replica takes the search, the primary still the log rows and the
placements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from pgvector import HalfVector

from app.embedded import EmbeddedRedis
from bench.driver import Limits, closed_loop
from bench.http import Http
from bench.infra import ServiceProcess, floor_pool
from bench.replica_pair import make_pair

DIM = 384
WORDS = (
    "alpha river stone window garden coffee meeting budget travel winter summer music "
    "project deadline invoice doctor school market engine bridge forest ocean castle "
    "library kitchen letter camera ticket station island harbor valley mountain desert"
).split()
FLOOR = """
    SELECT id, key, content FROM memory
    WHERE namespace_id = $1 AND deleted_at IS NULL
    ORDER BY embedding <=> $2 LIMIT 10"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def load(url: str, n: int, rng: np.random.Generator) -> None:
    """Batches of 200 through the API; a batch answered 503 (a statement timeout on a busy
    shared machine: all or nothing) is sent again."""
    vs = vectors(rng, n)
    async with Http(url, 4) as c:
        for start in range(0, n, 200):
            batch = [
                {
                    "key": f"m{i}",
                    "content": " ".join(rng.choice(WORDS, 12)),
                    "embedding": [float(x) for x in vs[i]],
                }
                for i in range(start, min(n, start + 200))
            ]
            for _ in range(5):
                r = await c.post(
                    f"/v1/robots/a{start // 200 % 10}/memories/batch",
                    json={"memories": batch, "working_memory": False},
                )
                if r.status_code != 503:
                    break
            assert r.status_code == 201, r.text[:500]


async def floor_phase(url: str, k: int, limits: Limits, queries: np.ndarray) -> dict[str, Any]:
    pool = await floor_pool(url, k)
    try:
        ns = await pool.fetchval("SELECT id FROM namespace WHERE name = 'default'")

        async def call(_w: int, i: int) -> None:
            await pool.fetch(FLOOR, ns, HalfVector(queries[i % len(queries)]))

        return (await closed_loop(call, k, limits)).to_json()
    finally:
        await pool.close()


async def service_phase(url: str, k: int, limits: Limits, queries: np.ndarray) -> dict[str, Any]:
    async with Http(url, k) as c:

        async def call(w: int, i: int) -> None:
            r = await c.post(
                f"/v1/robots/reader{w}/recall",
                json={
                    "query": "recall",
                    "strategy": "vector",
                    "embedding": [float(x) for x in queries[i % len(queries)]],
                    "limit": 10,
                    "min_score": 0,
                },
            )
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
            if len(r.json()["hits"]) != 10:
                raise RuntimeError("fewer than 10 hits")

        return (await closed_loop(call, k, limits)).to_json()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    queries = vectors(rng, 1000)
    limits = Limits(max_requests=1_000_000, max_seconds=args.seconds, warmup=200)
    base = Path(tempfile.mkdtemp(prefix="htm-bench-replica-"))
    pair = await asyncio.to_thread(make_pair, base)
    redis = EmbeddedRedis(base / "redis", persistent=False).start()
    results: dict[str, Any] = {"n": args.n, "concurrency": args.concurrency}
    settings = {"embedding_provider": "none", "dedupe": "off", "supersede": "off"}
    replicas = json.dumps([pair.replica.url])
    try:
        svc = await ServiceProcess(
            pair.primary.url, redis.url, base / "service.log", **settings
        ).start()
        try:
            t0 = time.perf_counter()
            await load(svc.base_url, args.n, rng)
            results["load_s"] = round(time.perf_counter() - t0, 1)
        finally:
            svc.stop()
        await pair.primary.sql("VACUUM ANALYZE memory")
        await pair.caught_up(120)
        floor_url = pair.primary.url
        results["floor_primary"] = await floor_phase(floor_url, args.concurrency, limits, queries)
        say(f"floor, primary: {results['floor_primary']['throughput']:.0f}/s")
        results["floor_replica"] = await floor_phase(
            pair.replica.url, args.concurrency, limits, queries
        )
        say(f"floor, replica: {results['floor_replica']['throughput']:.0f}/s")
        # Alternated, round after round: on a shared machine the load drifts.
        for r in range(args.rounds):
            for name, extra in [
                ("service_primary", {}),
                ("service_replica", {"database_replica_urls": replicas}),
            ]:
                svc = await ServiceProcess(
                    pair.primary.url, redis.url, base / f"{name}.log", **settings, **extra
                ).start()
                try:
                    got = await service_phase(svc.base_url, args.concurrency, limits, queries)
                finally:
                    svc.stop()
                results.setdefault(f"{name}_rounds", []).append(got)
                say(f"{name}, round {r + 1}: {got['throughput']:.0f}/s")
        for name in ("service_primary", "service_replica"):
            rounds = results[f"{name}_rounds"]
            results[name] = {
                key: sum(x[key] for x in rounds) / len(rounds)
                for key in ("throughput", "p50_ms", "p95_ms", "errors")
            }
    finally:
        redis.stop()
        pair.stop()
        shutil.rmtree(base, ignore_errors=True)
    floor = results["floor_primary"]["throughput"]
    for name in ("floor_replica", "service_primary", "service_replica"):
        results[name]["of_floor"] = round(results[name]["throughput"] / floor, 3)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replica", description=__doc__)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2, help="service phases, alternated")
    p.add_argument("--seed", type=int, default=20261127)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    results = asyncio.run(run(args))
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
