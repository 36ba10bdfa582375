"""`python -m evals [--quick] [--sets conv,facts] [--configs PATH.json]`: the recall eval.

Starts PostgreSQL, Redis (embedded, as the bench does) and the service with the local
embedding model, loads each set through the HTTP API into a fresh database, asks every
question with every configuration (the baseline vector / fulltext / hybrid, plus those of
--configs), prints a table and writes evals/results/latest.{json,md} and a dated copy.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals import report
from evals.runner import BASELINE, Config, load, load_configs, run_config
from evals.sets import SETS, EvalSet

DATABASE = "htm_eval"
CONCURRENCY = 4
STEP_LIMIT_S = 1800.0
DESCRIPTIONS = {
    "conv": "Generated multi-session conversations (evals/data/conv/), one namespace each.",
    "facts": "bench/quality.py's labelled facts and paraphrased questions, with background "
    "noise, in one namespace.",
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals", description=__doc__)
    p.add_argument("--quick", action="store_true", help="2 dialogues and a small facts set")
    p.add_argument("--sets", default="conv,facts", help="comma-separated: conv, facts")
    p.add_argument("--configs", type=Path, help="a JSON file of more configurations")
    p.add_argument("--no-baseline", action="store_true", help="only the --configs ones")
    p.add_argument("--keep-database", action="store_true")
    p.add_argument("--out", type=Path, default=report.RESULTS_DIR)
    args = p.parse_args(argv)
    unknown = set(args.sets.split(",")) - SETS.keys()
    if unknown:
        p.error(f"unknown sets: {', '.join(sorted(unknown))}")
    return args


async def run(args: argparse.Namespace, sets: list[EvalSet], configs: list[Config]) -> dict:
    from bench.http import Http
    from bench.infra import BENCH_DIR, Servers, ServiceProcess, drop_database, fresh_database
    from bench.report import versions

    results: dict[str, Any] = {
        "schema": 1,
        "profile": "quick" if args.quick else "full",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "concurrency": CONCURRENCY,
        "limit": 10,
        "sets": {},
    }
    t0 = time.perf_counter()
    servers = Servers.start()
    service = None
    try:
        url = await fresh_database(servers, DATABASE)
        log = BENCH_DIR / "logs" / "service-eval.log"
        service = ServiceProcess(url, servers.redis_url, log, embedding_provider="local")
        t1 = time.perf_counter()
        await service.start(limit_s=300)
        results["service_start_s"] = time.perf_counter() - t1
        results["embedding"] = service.readyz.get("embedding")
        results["versions"] = versions(service.readyz)
        async with Http(service.base_url, 2 * CONCURRENCY, timeout_s=120.0) as client:
            t1 = time.perf_counter()
            memories = 0
            for s in sets:
                say(f"loading {s.name}: {sum(len(d) for d in s.groups.values())} memories")
                async with asyncio.timeout(STEP_LIMIT_S):
                    n = await load(client, s, prefix="eval-")
                memories += n
                results["sets"][s.name] = {
                    "description": DESCRIPTIONS[s.name],
                    "memories": n,
                    "questions": len(s.questions),
                    "configs": {},
                }
            results["load_s"] = time.perf_counter() - t1
            results["memories"] = memories
            say(f"loaded {memories} memories in {results['load_s']:.0f}s")
            for s in sets:
                for c in configs:
                    async with asyncio.timeout(STEP_LIMIT_S):
                        r = await run_config(client, s, c, prefix="eval-", concurrency=CONCURRENCY)
                    results["sets"][s.name]["configs"][c.name] = r
                    state = f"R@10 {r['all']['recall_at_10']:.3f}" if r["status"] == "ok" else (
                        f"failed: {r['http_status']}")  # fmt: skip
                    say(f"  {s.name} / {c.name}: {state}")
    finally:
        if service is not None:
            service.stop()
        try:
            if not args.keep_database:
                await drop_database(servers, DATABASE)
        finally:
            servers.stop()
    results["seconds"] = time.perf_counter() - t0
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.infra import offline_env
    from bench.report import machine

    os.environ.update(offline_env())
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    configs = [] if args.no_baseline else list(BASELINE)
    if args.configs:
        configs += load_configs(args.configs)
    names = [c.name for c in configs]
    if not configs or len(set(names)) != len(names):
        say(f"configurations must be at least one, with distinct names: {names}")
        return 2
    sets = [SETS[name](args.quick) for name in args.sets.split(",")]
    try:
        results = asyncio.run(run(args, sets, configs))
    except KeyboardInterrupt:
        say("interrupted: everything the eval started is stopped")
        return 130
    results["machine"] = machine()
    dated, md = report.write(results, args.out)
    print(report.terminal(results))
    say(f"results: {dated} and {md}; {results['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
