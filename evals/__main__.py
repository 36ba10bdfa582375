"""`python -m evals [--quick] [--sets conv,facts,realtalk] [--modes docs,content-only]
[--configs PATH.json] [--deployments ...] [--check]`.

The recall eval. Starts PostgreSQL and Redis (embedded, as the bench does), then for each
deployment (evals/deployments.py: by default `old-default` and `default`) the service with the
local embedding model and the deployment's environment, loads each set in each of its modes
through the HTTP API into the deployment's fresh database, asks every question with every
configuration (the baseline vector / fulltext / hybrid / default, plus those of --configs),
stops it; prints a table and writes evals/results/latest.{json,md} and a dated copy. It checks
that hybrid's R@10 is at least that of each of its inputs (vector, full text) on every set and
mode: a FAIL line when not, and with --check an exit status of 1.
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
from evals.deployments import DEFAULTS, Deployment, configs_of, load_deployments, select
from evals.replay import NO_FLUSH_S, replay
from evals.runner import (
    BASELINE,
    DEEP_LIMIT,
    LIMIT,
    Config,
    Loaded,
    load,
    load_configs,
    run_config,
)
from evals.sets import MODES, SET_MODES, SETS, EvalSet, Mode, Unavailable

CONCURRENCY = 4
STEP_LIMIT_S = 1800.0
EMBEDDING_TIMEOUT_S = 120
EVAL_DIR = Path(__file__).resolve().parent.parent / ".htm" / "eval"
DESCRIPTIONS = {
    "conv": "Generated multi-session conversations (evals/data/conv/), one namespace each.",
    "facts": "bench/quality.py's labelled facts and paraphrased questions, with background "
    "noise, in one namespace.",
    "changes": "The facts set where each person's job, city and car had an earlier value, "
    "stated in the same words before the current one (evals/sets.py changes_set).",
    "realtalk": "Ten real two-person chats over 21 days nobody on this project wrote (REALTALK, "
    "Lee et al. 2025, arXiv 2502.13270; read from ../shared/realtalk/ at eval time), one "
    "namespace each; chats 1-5 dev, 6-10 test.",
}


def label(s: EvalSet) -> str:
    """A set in a mode, as the results name it: `realtalk/content-only`."""
    return f"{s.name}/{s.mode}"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evals", description=__doc__)
    p.add_argument("--quick", action="store_true", help="2 dialogues and a small facts set")
    p.add_argument("--sets", default="conv,facts,realtalk",
                   help="comma-separated: conv, facts, realtalk, changes")  # fmt: skip
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated: the conversational sets' loading modes "
                   "(docs, content-only; the facts sets have docs only)")  # fmt: skip
    p.add_argument("--realtalk-time", choices=("session", "message"), default="session",
                   help="realtalk's created_at: its session's start plus one second a "
                   "message, or the message's own time")  # fmt: skip
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when hybrid's R@10 is below vector's or full text's anywhere",
    )
    p.add_argument("--configs", type=Path, action="append", default=[],
                   help="a JSON file of more configurations (repeatable)")  # fmt: skip
    p.add_argument("--no-baseline", action="store_true", help="only the --configs ones")
    p.add_argument(
        "--deployments",
        type=Path,
        help="a JSON file of deployments (default: old-default and default)",
    )
    p.add_argument("--only", metavar="NAMES",
                   help="comma-separated: run only these deployments")  # fmt: skip
    p.add_argument("--keep-database", action="store_true")
    p.add_argument(
        "--reuse-database",
        action="store_true",
        help="ask the questions of a database a --keep-database run left (every set and "
        "mode of this run loaded), without loading again; implies --keep-database",
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="before the questions, a usage stream of each set's own turns asked as questions, "
        "with feedback (evals/replay.py): access counts and learned importance that are not "
        "the eval's own recalls, whose accesses are then not written",
    )
    p.add_argument("--out", type=Path, default=report.RESULTS_DIR)
    args = p.parse_args(argv)
    unknown = set(args.sets.split(",")) - SETS.keys()
    if unknown:
        p.error(f"unknown sets: {', '.join(sorted(unknown))}")
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        p.error(f"unknown modes: {', '.join(sorted(unknown))}")
    return args


def plan(args: argparse.Namespace) -> tuple[list[tuple[str, Mode]], dict[str, str]]:
    """The (set, mode) pairs to run, and the sets skipped because their files are absent."""
    modes = args.modes.split(",")
    pairs: list[tuple[str, Mode]] = []
    skipped: dict[str, str] = {}
    for name in args.sets.split(","):
        try:
            build_set(args, name, "docs", labels=False)
        except Unavailable as e:
            say(f"set {name} skipped: {e}")
            skipped[name] = str(e)
            continue
        pairs += [(name, m) for m in SET_MODES[name] if m in modes]
    return pairs, skipped


def build_set(args: argparse.Namespace, name: str, mode: Mode, labels: bool) -> EvalSet:
    extra = {"created": args.realtalk_time} if name == "realtalk" else {}
    return SETS[name](args.quick, mode=mode, labels=labels, **extra)


async def run(
    args: argparse.Namespace, deployments: list[Deployment], configs: list[Config]
) -> dict[str, Any]:
    pairs, skipped = plan(args)
    results: dict[str, Any] = {
        "schema": 3,
        "profile": "quick" if args.quick else "full",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "concurrency": CONCURRENCY,
        "limits": [LIMIT, DEEP_LIMIT],
        "realtalk_time": args.realtalk_time,
        "skipped": skipped,
        "deployments": {},
    }
    t0 = time.perf_counter()
    servers = start_servers()
    try:
        for d in deployments:
            say(f"deployment {d.name}: env {d.env or '{}'}")
            try:
                results["deployments"][d.name] = await run_deployment(
                    args, servers, d, configs, pairs
                )
            except RuntimeError as e:  # the service refused its settings, or failed to load
                say(f"  deployment {d.name} failed: {e}")
                results["deployments"][d.name] = {
                    "status": "failed", "error": str(e), "env": d.env, "request": d.request,
                    "headline": d.headline, "sets": {},
                }  # fmt: skip
    finally:
        servers.stop()
    results["seconds"] = time.perf_counter() - t0
    results["hybrid_checks"] = report.hybrid_checks(results)
    checked = [c["holds"] for c in results["hybrid_checks"]]
    results["hybrid_ge_inputs"] = all(checked) if checked else None
    return results


def start_servers() -> Any:
    """The bench's servers (HTM_BENCH_DATABASE_URL / HTM_BENCH_REDIS_URL), or embedded ones of
    the eval's own under .htm/eval/: a bench run stops the embedded servers of .htm/bench/
    when it ends, which would cut an eval running beside it."""
    from app.embedded import EmbeddedPostgres, EmbeddedRedis
    from bench.infra import Servers

    if os.environ.get("HTM_BENCH_DATABASE_URL") or os.environ.get("HTM_BENCH_REDIS_URL"):
        return Servers.start()
    servers = Servers(server_url="", redis_url="")
    try:
        servers.pg = EmbeddedPostgres(EVAL_DIR / "pgdata", database="postgres").start()
        servers.server_url = servers.pg.url("postgres")
        servers.redis = EmbeddedRedis(EVAL_DIR / "redis", persistent=False).start()
        servers.redis_url = servers.redis.url
    except BaseException:
        servers.stop()
        raise
    return servers


async def run_deployment(
    args: argparse.Namespace,
    servers: Any,
    d: Deployment,
    configs: list[Config],
    pairs: list[tuple[str, Mode]],
) -> dict[str, Any]:
    """One deployment: its own database and service, every set loaded, every configuration
    asked, then the service stopped (and the database dropped)."""
    from bench.http import Http
    from bench.infra import (
        ServiceProcess,
        admin,
        drop_database,
        fresh_database,
        kept_database,
    )
    from bench.report import versions

    out: dict[str, Any] = {
        "status": "ok",
        "env": d.env,
        "request": d.request,
        "headline": d.headline,
        "calibrate": d.calibrate,
        "labels": d.labels,
        "configs": [c.name for c in configs_of(d, configs)],
        "sets": {},
    }
    t0 = time.perf_counter()
    sets = [build_set(args, name, mode, d.labels) for name, mode in pairs]
    service = None
    keep = args.keep_database or args.reuse_database
    try:
        expected = sum(len(g) for s in sets for g in s.groups.values())
        kept = await kept_database(servers, d.database, 1) if args.reuse_database else None
        url = kept or await fresh_database(servers, d.database)
        log = EVAL_DIR / "logs" / f"service-{d.name}.log"
        # a loaded 2-core machine can take more than the default 10 s to embed a batch of
        # 100: an embedding deferred to the worker would fail the load
        service = ServiceProcess(url, servers.redis_url, log, embedding_provider="local",
                                 embedding_timeout_s=str(EMBEDDING_TIMEOUT_S))  # fmt: skip
        service.env["HTM_DATA_DIR"] = str(EVAL_DIR / "service")
        service.env.update(d.env)
        t1 = time.perf_counter()
        await service.start(limit_s=300)
        out["service_start_s"] = time.perf_counter() - t1
        out["embedding"] = service.readyz.get("embedding")
        out["versions"] = versions(service.readyz)
        async with Http(service.base_url, 2 * CONCURRENCY, timeout_s=120.0) as client:
            t1 = time.perf_counter()
            memories = 0
            if kept:
                say(f"  reusing {d.database}: its {expected} memories are not loaded again")
            for s in sets:
                if kept:
                    n = Loaded(sum(len(g) for g in s.groups.values()), 0)
                else:
                    say(f"  loading {label(s)}: {sum(len(g) for g in s.groups.values())} memories")
                    async with asyncio.timeout(STEP_LIMIT_S):
                        n = await load(client, s, prefix=d.prefix)
                memories += n.sent
                out["sets"][label(s)] = {
                    "set": s.name,
                    "mode": s.mode,
                    "description": f"{DESCRIPTIONS[s.name]} {s.note}".strip(),
                    "memories": n.sent,
                    "duplicates": n.duplicates,
                    "questions": len(s.questions),
                    "configs": {},
                }
            out["load_s"] = time.perf_counter() - t1
            out["memories"] = memories
            say(f"  loaded {memories} memories in {out['load_s']:.0f}s")
            if args.replay:
                await admin(servers.database_url(d.database), "TRUNCATE memory_access")
                for s in sets:
                    t1 = time.perf_counter()
                    say(f"  replaying {label(s)}")
                    async with asyncio.timeout(STEP_LIMIT_S):
                        r = await replay(client, s, prefix=d.prefix, concurrency=CONCURRENCY)
                    out["sets"][label(s)]["replay"] = {
                        **r.json(),
                        "seconds": time.perf_counter() - t1,
                    }
                    say(f"  replayed {label(s)}: {r.json()}")
        if args.replay:  # its counts written at shutdown; the questions' never (replay.py)
            service.stop()
            service.env["HTM_ACCESS_FLUSH_INTERVAL_S"] = NO_FLUSH_S
            await service.start(limit_s=300)
        async with Http(service.base_url, 2 * CONCURRENCY, timeout_s=120.0) as client:
            for s in sets:
                for c in configs_of(d, configs):
                    async with asyncio.timeout(STEP_LIMIT_S):
                        r = await run_config(client, s, c, prefix=d.prefix,
                                             concurrency=CONCURRENCY, base=d.request)  # fmt: skip
                    out["sets"][label(s)]["configs"][c.name] = r
                    state = f"R@10 {r['all']['recall_at_10']:.3f}" if r["status"] == "ok" else (
                        f"failed: {r['http_status']}")  # fmt: skip
                    say(f"  {d.name} / {label(s)} / {c.name}: {state}")
    finally:
        if service is not None:
            service.stop()
        if not keep:
            await drop_database(servers, d.database)
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.infra import offline_env
    from bench.report import machine

    os.environ.update(offline_env())
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    configs = [] if args.no_baseline else list(BASELINE)
    for path in args.configs:
        configs += load_configs(path)
    names = [c.name for c in configs]
    if not configs or len(set(names)) != len(names):
        say(f"configurations must be at least one, with distinct names: {names}")
        return 2
    try:
        known = load_deployments(args.deployments) if args.deployments else list(DEFAULTS)
        deployments = select(known, args.only)
    except (ValueError, KeyError, OSError) as e:
        say(f"deployments: {e}")
        return 2
    try:
        results = asyncio.run(run(args, deployments, configs))
    except KeyboardInterrupt:
        say("interrupted: everything the eval started is stopped")
        return 130
    results["machine"] = machine()
    dated, md = report.write(results, args.out)
    print(report.terminal(results))
    say(f"results: {dated} and {md}; {results['seconds']:.0f}s")
    return 1 if args.check and results["hybrid_ge_inputs"] is False else 0


if __name__ == "__main__":
    sys.exit(main())
