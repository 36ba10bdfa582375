"""The default recall (hybrid, loading its hits into working memory) against the same recall
without loading, interleaved (issue 46, item 1: working memory off a recall's critical path).

    .venv/bin/python -m bench.wm_off_path [--rounds 5] [--out FILE.json]

Runs on the database a scale run kept (`python -m bench --sizes 10000 --keep-databases`):
the service (`htm serve`, this checkout's code) on it, Redis flushed. Per round:

- c=1: the two recalls request by request in alternating order (bench.driver.interleaved),
  each with the scale run's questions and client vectors; p50 of each and their ratio. A
  load applied after its answer runs beside the next request, whichever it is, so this
  ratio understates the load's cost to the loading recall and overstates it to the other.
- c=1, settled: the same, but after each loading recall an untimed read of that robot's
  working memory (`GET …/context?max_tokens=1`, which waits for its pending load), so that
  each timed request starts on an idle service: the answer's own latency.
- c=8: each for a fixed time (closed loop), CPU ms per request of service + PostgreSQL +
  Redis (bench.infra.CpuMeter), measured until 0.5 s after the last answer, so that a load
  applied after its answer is counted; and the other load on the machine.

The loading recall's robots are `wm-load-<w>`, the other's `wm-plain-<w>` (a worker each),
so the loads find the working memory growing as an agent's does. Reports the median over
rounds of each figure: rounds interleave too, so drift and other work fall on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench import dataset
from bench.base import JSON, RECALL_LIMIT, check_status, vec_json
from bench.driver import Limits, closed_loop, interleaved, summarize
from bench.http import Http
from bench.infra import BENCH_DIR, CpuMeter, Servers, ServiceProcess, kept_database

C1 = Limits(max_requests=200, max_seconds=4.0, warmup=10, min_requests=40)
CK = Limits(max_requests=100_000, max_seconds=4.0, warmup=16)
K = 8
SETTLE_S = 0.5


def bodies(seed: int, load: bool, n: int = 400) -> list[bytes]:
    qs = dataset.scale_questions(seed, n)
    out = []
    for text, v in zip(qs.texts, qs.vectors, strict=True):
        body = {
            "query": text,
            "strategy": "hybrid",
            "limit": RECALL_LIMIT,
            "load_into_working_memory": load,
        }
        out.append((json.dumps(body)[:-1] + f',"embedding":{vec_json(v)}}}').encode())
    return out


async def settled(plain: Any, load: Any, settle: Any, n: int) -> dict[str, float]:
    """c=1, alternating, each loading recall followed by an untimed settling read."""
    times: dict[str, list[float]] = {"plain": [], "load": []}
    for i in range(C1.warmup + n):
        order = (
            [("plain", plain), ("load", load)] if i % 2 == 0 else [("load", load), ("plain", plain)]
        )
        for name, call in order:
            t0 = time.perf_counter()
            await call(0, i)
            if i >= C1.warmup:
                times[name].append(time.perf_counter() - t0)
            if name == "load":
                await settle()
    return {k: float(summarize(v)["p50_ms"] or 0.0) for k, v in times.items()}


async def cpu_phase(client: Http, meter: CpuMeter, call: Any) -> dict[str, Any]:
    a = await meter.sample()
    t0 = time.perf_counter()
    phase = await closed_loop(call, K, CK)
    await asyncio.sleep(SETTLE_S)  # loads applied after their answers land in this phase
    seconds = time.perf_counter() - t0
    b = await meter.sample()
    cpu = CpuMeter.per_request(a, b, phase.requests, seconds)
    served = sum(cpu[k] or 0.0 for k in ("service", "postgres", "redis"))
    return {"req_s": phase.throughput, "errors": phase.errors, "cpu": cpu, "cpu_ms": served}


async def run(rounds: int, seed: int, n: int) -> dict[str, Any]:
    servers = Servers.start()
    try:
        url = await kept_database(servers, f"htm_bench_{n}", n)
        if url is None:
            raise SystemExit(f"no kept database for N={n}: run python -m bench --keep-databases")
        redis = aioredis.from_url(servers.redis_url, decode_responses=True)
        await redis.flushdb()
        log_path = BENCH_DIR / "logs" / "wm-off-path.log"
        service = ServiceProcess(url, servers.redis_url, log_path, embedding_provider="none")
        await service.start()
        try:
            async with Http(service.base_url, K * 2) as client:
                meter = CpuMeter(service.pid, servers.postmaster_pid, redis)
                plain, load = bodies(seed, False), bodies(seed, True)

                def caller(kind: str, sent: list[bytes]) -> Any:
                    async def call(w: int, i: int) -> None:
                        r = await client.post(
                            f"/v1/robots/wm-{kind}-{w}/recall",
                            content=sent[i % len(sent)],
                            headers=JSON,
                        )
                        check_status(r, 200)

                    return call

                out: list[dict[str, Any]] = []
                for r in range(rounds):
                    c1 = await interleaved(
                        [("plain", caller("plain", plain)), ("load", caller("load", load))], C1
                    )

                    async def settle() -> None:
                        r = await client.get("/v1/robots/wm-load-0/context?max_tokens=1")
                        check_status(r, 200)

                    quiet = await settled(
                        caller("plain", plain), caller("load", load), settle, C1.min_requests * 2
                    )
                    ck = {}
                    order = ("plain", "load") if r % 2 == 0 else ("load", "plain")
                    for kind in order:
                        ck[kind] = await cpu_phase(
                            client, meter, caller(kind, plain if kind == "plain" else load)
                        )
                    row = {
                        "p50_plain_ms": c1["plain"].p50_ms,
                        "p50_load_ms": c1["load"].p50_ms,
                        "ratio": c1["load"].p50_ms / c1["plain"].p50_ms,  # type: ignore[operator]
                        "settled_p50_plain_ms": quiet["plain"],
                        "settled_p50_load_ms": quiet["load"],
                        "settled_ratio": quiet["load"] / quiet["plain"],
                        "cpu_plain_ms": ck["plain"]["cpu_ms"],
                        "cpu_load_ms": ck["load"]["cpu_ms"],
                        "cpu_delta_ms": ck["load"]["cpu_ms"] - ck["plain"]["cpu_ms"],
                        "req_s_plain": ck["plain"]["req_s"],
                        "req_s_load": ck["load"]["req_s"],
                        "other_pct": statistics.mean(ck[k]["cpu"]["other_pct"] or 0.0 for k in ck),
                        "c8": ck,
                    }
                    out.append(row)
                    print(
                        f"round {r + 1}: c=1 p50 {row['p50_plain_ms']:.2f} / "
                        f"{row['p50_load_ms']:.2f} ms (x{row['ratio']:.3f}); settled "
                        f"{quiet['plain']:.2f} / {quiet['load']:.2f} ms "
                        f"(x{row['settled_ratio']:.3f}); c=8 CPU "
                        f"{row['cpu_plain_ms']:.2f} / {row['cpu_load_ms']:.2f} ms/req "
                        f"(+{row['cpu_delta_ms']:.2f}); other load {row['other_pct']:.0f} %",
                        flush=True,
                    )
        finally:
            service.stop()
            await redis.aclose()
    finally:
        servers.stop()
    keys = ("p50_plain_ms", "p50_load_ms", "ratio", "settled_p50_plain_ms",
            "settled_p50_load_ms", "settled_ratio", "cpu_plain_ms", "cpu_load_ms",
            "cpu_delta_ms", "req_s_plain", "req_s_load", "other_pct")  # fmt: skip
    return {
        "rounds": out,
        "median": {k: statistics.median(r[k] for r in out) for k in keys},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    result = asyncio.run(run(args.rounds, args.seed, args.n))
    m = result["median"]
    print(
        f"median: c=1 p50 {m['p50_plain_ms']:.2f} / {m['p50_load_ms']:.2f} ms, ratio "
        f"x{m['ratio']:.3f}; settled x{m['settled_ratio']:.3f}; c=8 CPU "
        f"{m['cpu_plain_ms']:.2f} / {m['cpu_load_ms']:.2f} ms/req "
        f"(+{m['cpu_delta_ms']:.2f}); other load {m['other_pct']:.0f} %"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
