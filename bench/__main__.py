"""`python -m bench [--quick] [--compare PATH]`: see bench/__init__.py and `--help`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.config import get_settings
from bench import report
from bench.base import PROFILES, Profile, QuietBudget
from bench.infra import Servers, offline_env
from bench.scale import run_scale


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="N = 2,000 and 10,000; short phases")
    p.add_argument(
        "--large", action="store_true", help="N = 1,000,000 (about an hour; make bench-large)"
    )
    p.add_argument(
        "--copy-floor", type=int, help="raw COPY of the first K memories beside the load (0: off)"
    )
    p.add_argument("--sizes", help="comma-separated N values (overrides the profile)")
    p.add_argument("--concurrency", type=int, help="K concurrent clients (default 8)")
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--compare", type=Path, help="a previous results JSON to print deltas against")
    p.add_argument(
        "--skip-model",
        action="store_true",
        help="no local-model run (quality, adds, recall with the model in the loop)",
    )
    p.add_argument("--keep-databases", action="store_true", help="keep the bench databases")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="measure a database kept by --keep-databases (migrated, not reloaded); implies it",
    )
    p.add_argument(
        "--load-from",
        type=Path,
        help="with --reuse: the results JSON of the run that loaded the kept databases; its "
        "load figures (rate, COPY floor, htm import) are reported beside this run's",
    )
    p.add_argument(
        "--private-share",
        type=int,
        metavar="PCT",
        help="make PCT %% of the memories private to their authors (never the reading robots) "
        "before measuring, and the rest namespace-wide (issue 35's visibility bench)",
    )
    p.add_argument(
        "--vector-storage",
        choices=["auto", "vector", "halfvec"],
        help="HTM_VECTOR_STORAGE for the bench databases' migration (default: the setting's)",
    )
    p.add_argument(
        "--ops",
        help="comma-separated operations to measure (default: all), e.g. "
        "add,recall_hybrid_all,recall_hybrid_e2e,search_text; `quality` is the model run "
        "(quality, adds with the model), left out when --ops does not name it",
    )
    p.add_argument(
        "--service",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the service under test, e.g. group_commit_flushes=1 (repeatable; "
        "the service sees no HTM_ variable of this shell)",
    )
    p.add_argument("--out", type=Path, default=report.RESULTS_DIR)
    return p.parse_args(argv)


async def run(args: argparse.Namespace, profile: Profile, servers: Servers) -> dict[str, Any]:
    results: dict[str, Any] = {
        "schema": 1,
        "profile": profile.name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": report.machine(),
        "settings": {
            **dataclasses.asdict(profile),
            "seed": args.seed,
            "vector_storage": get_settings().vector_storage,
            "reused_databases": args.reuse,
        },
        "scale": {},
    }
    t0 = time.perf_counter()
    quiet = QuietBudget()
    for n in profile.sizes:
        results["scale"][str(n)] = await run_scale(
            servers,
            profile,
            n,
            args.seed,
            args.keep_databases or args.reuse,
            quiet,
            say,
            set(args.ops.split(",")) if args.ops else None,
            reuse=args.reuse,
            loaded=_loaded(args.load_from, n),
            model=not args.skip_model,
            private_share=args.private_share,
        )
    results["quiet_wait_s"] = quiet.spent_s
    if not args.skip_model and (args.ops is None or "quality" in args.ops.split(",")):
        from bench.quality import run_model

        results["model"] = await run_model(servers, profile, args.seed, args.keep_databases, say)
    first = next(iter(results["scale"].values()), {})
    results["client"] = first.get("client")
    results["versions"] = report.versions(first.get("readyz", {}))
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["seconds"] = time.perf_counter() - t0
    results["targets"] = report.targets(results)
    return results


def _loaded(path: Path | None, n: int) -> dict[str, Any] | None:
    """The load figures of N in an earlier results file, marked with that run's date."""
    if path is None:
        return None
    earlier = json.loads(path.read_text())
    load = earlier["scale"][str(n)]["load"]
    return {**load, "reused_from": earlier["date"]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    profile = PROFILES["quick" if args.quick else "large" if args.large else "full"]
    if args.sizes:
        profile = dataclasses.replace(profile, sizes=[int(x) for x in args.sizes.split(",")])
    if args.concurrency:
        profile = dataclasses.replace(profile, concurrency=args.concurrency)
    if args.copy_floor is not None:
        profile = dataclasses.replace(profile, copy_floor=args.copy_floor)
    if args.service:
        given = dict(kv.split("=", 1) for kv in args.service)
        profile = dataclasses.replace(profile, service={**profile.service, **given})
    previous = json.loads(args.compare.read_text()) if args.compare else None
    os.environ.update(offline_env())
    if args.vector_storage:
        # The migrations read it (in this process); the service detects what they made.
        os.environ["HTM_VECTOR_STORAGE"] = args.vector_storage
        get_settings.cache_clear()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM takes the Ctrl-C path: the run is cancelled and every `finally` stops what it
    # started (the service, the databases, the embedded servers).
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    # A shell starts a background job (`make bench &`) with SIGINT ignored; asyncio's runner
    # then installs no handler and the SIGTERM above did nothing (the run went on).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    import uvloop

    say(f"bench ({profile.name}): N = {profile.sizes}, K = {profile.concurrency}")
    servers = Servers.start()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            results = runner.run(run(args, profile, servers))
    except KeyboardInterrupt:
        say("interrupted: everything the bench started is stopped")
        return 130
    finally:
        servers.stop()

    dated, md_path = report.write(results, args.out)
    print(md_path.read_text())
    say(f"results: {dated} (and {md_path.stem}.json, {md_path.name}); {results['seconds']:.0f}s")
    if previous is not None:
        print(report.compare(previous, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
