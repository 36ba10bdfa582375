"""Hybrid recall right after a bulk load, before and after the statistics pass (issue 46).

`python -m bench.statistics` (defaults: N = 12,000 memories, 200 recalls per phase): a fresh
database, N memories through POST …/memories/batch (bench/processes.load; exact dedupe keeps
a few fewer: N is above the 10,000 rows from which full text takes the column statistics,
LexemeStats.min_rows), a VACUUM (no statistics: the same hinted pages for both phases), then:

1. **before**: a service with the statistics pass off (`HTM_ANALYZE_INTERVAL_S=0`, what every
   version before it did) and autovacuum kept from analyzing the table meanwhile
   (`autovacuum_analyze_threshold` raised: the window between a load and autovacuum's first
   visit, made to last): hybrid recall, client vectors, c=1, each question once;
2. **after**: a service with the default settings; the time until its pass has analyzed
   memory (pg_stat_user_tables.analyze_count), then the same recalls.

Both phases ask the same questions, in the same order, of services started the same way, so
the difference is the plan: each question word's matches counted (no statistics) against the
column statistics. Writes bench/results/<date>-statistics.md and .json.
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

import asyncpg

from bench import dataset
from bench.base import check_status, vec_json
from bench.driver import summarize
from bench.http import Http
from bench.infra import BENCH_DIR, Servers, ServiceProcess, asyncpg_kwargs, fresh_database
from bench.processes import load

DATABASE = "htm_bench_statistics"
RESULTS = Path(__file__).parent / "results"
JSON = {"content-type": "application/json"}

STATE = """
    SELECT s.analyze_count, s.autoanalyze_count, s.n_mod_since_analyze, c.reltuples
    FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relname = 'memory'"""


async def table_state(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
    try:
        return dict(await conn.fetchrow(STATE))
    finally:
        await conn.close()


async def vacuum(url: str) -> None:
    conn = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
    try:
        await conn.execute("VACUUM memory")
    finally:
        await conn.close()


async def recalls(base_url: str, bodies: list[bytes]) -> dict[str, Any]:
    """Each body once, one at a time (after 20 warm-up requests of other questions)."""
    async with Http(base_url, 1) as c:
        for body in bodies[-20:]:
            check_status(await c.post("/v1/robots/reader/recall", content=body, headers=JSON), 200)
        latencies = []
        load0 = os.getloadavg()[0]
        for body in bodies[:-20]:
            t0 = time.perf_counter()
            r = await c.post("/v1/robots/reader/recall", content=body, headers=JSON)
            latencies.append(time.perf_counter() - t0)
            check_status(r, 200)
    figures = summarize(latencies)
    return {
        "requests": len(latencies),
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()},
        "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


async def run(n: int, questions: int, seed: int) -> dict[str, Any]:
    servers = Servers.start()
    out: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "n": n,
        "questions": questions,
    }
    logs = BENCH_DIR / "logs"
    try:
        url = await fresh_database(servers, DATABASE)
        conn = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
        try:  # autovacuum on, but its analyze cannot come within the run
            await conn.execute("ALTER TABLE memory SET (autovacuum_analyze_threshold = 2000000000)")
        finally:
            await conn.close()
        qs = dataset.scale_questions(seed, questions + 20)
        bodies = [
            json.dumps({"query": qs.texts[i], "strategy": "hybrid", "limit": 10})[:-1].encode()
            + f',"embedding":{vec_json(qs.vectors[i])}}}'.encode()
            for i in range(len(qs.texts))
        ]
        before = await ServiceProcess(
            url, servers.redis_url, logs / "statistics-before.log",
            embedding_provider="none", analyze_interval_s="0",
        ).start()  # fmt: skip
        try:
            out["load_s"] = round(await load(before.base_url, n, seed), 1)
            # VACUUM, which makes no column statistics: both phases read the same hinted,
            # all-visible pages (the first reads of fresh rows otherwise pay for that).
            await vacuum(url)
            await asyncio.sleep(2.0)  # the loading backends' counters reach the views
            out["state_after_load"] = await table_state(url)
            out["before"] = await recalls(before.base_url, bodies)
            out["state_before"] = await table_state(url)
        finally:
            before.stop()
        started = time.perf_counter()
        after = await ServiceProcess(
            url, servers.redis_url, logs / "statistics-after.log", embedding_provider="none"
        ).start()
        try:
            analyzed = out["state_before"]["analyze_count"]
            while (await table_state(url))["analyze_count"] == analyzed:
                if time.perf_counter() - started > 120:
                    raise RuntimeError("the statistics pass did not analyze memory in 120 s")
                await asyncio.sleep(0.2)
            out["analyzed_after_s"] = round(time.perf_counter() - started, 1)
            out["state_analyzed"] = await table_state(url)
            out["after"] = await recalls(after.base_url, bodies)
        finally:
            after.stop()
        await servers_drop(servers)
    finally:
        servers.stop()
    return out


async def servers_drop(servers: Servers) -> None:
    from bench.infra import drop_database

    await drop_database(servers, DATABASE)


def report(out: dict[str, Any]) -> str:
    b, a = out["before"], out["after"]
    lines = [
        f"# Hybrid recall after a bulk load, before and after the statistics pass "
        f"({out['date']}, {out['machine']})",
        "",
        f"`python -m bench.statistics`: N = {out['n']:,} memories loaded through the batch "
        f"endpoint in {out['load_s']} s, then {b['requests']} hybrid recalls (client vectors, "
        "c=1, each question once) of a service with the pass off (before) and of one with "
        f"the defaults (after; its pass analyzed memory {out['analyzed_after_s']} s after it "
        "started).",
        "",
        "| phase | p50 ms | p95 ms | p99 ms | load avg (1 min) at start / end |",
        "|---|---:|---:|---:|---|",
    ]
    for name, f in (("before (no statistics: counts)", b), ("after (ANALYZE'd)", a)):
        load = " / ".join(str(x) for x in f["load_avg_1m"])
        lines.append(f"| {name} | {f['p50_ms']} | {f['p95_ms']} | {f['p99_ms']} | {load} |")
    lines += [
        "",
        f"p50 after / before: {a['p50_ms'] / b['p50_ms']:.2f}×. memory after the load: "
        f"{out['state_after_load']}; after the pass: {out['state_analyzed']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.statistics", description=__doc__)
    p.add_argument("--n", type=int, default=12_000)
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    out = asyncio.run(run(args.n, args.questions, args.seed))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{out['date']}-statistics"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    stem.with_suffix(".md").write_text(report(out))
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
