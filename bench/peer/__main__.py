"""python -m bench.peer [--n 10000] [--rounds 3] ...: see bench/peer/__init__.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from app.config import PROJECT_ROOT
from bench.peer import report
from bench.peer.run import Config, run

RESULTS = PROJECT_ROOT / "bench" / "results"
MARKDOWN = Path(__file__).with_name("RESULTS.md")
NOTES = "<!-- notes: kept when the table above is written again -->"


def _args() -> tuple[Config, argparse.Namespace]:
    d = Config()
    ap = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__)
    ap.add_argument("--n", type=int, default=d.n, help="memories loaded into each system")
    ap.add_argument("--rounds", type=int, default=d.rounds)
    ap.add_argument("--concurrency", type=int, default=d.concurrency)
    ap.add_argument("--threads", type=int, default=d.threads, help="model threads, each system")
    ap.add_argument("--c1", type=int, default=d.c1, help="timed requests per way at c=1")
    ap.add_argument("--ck", type=int, default=d.ck, help="timed requests per way at c=K")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--no-quality", action="store_true", help="skip recall@10")
    ap.add_argument(
        "--max-other-load",
        type=float,
        default=d.max_other_load,
        help="%% of all cores other processes may use: above it before the run, the run "
        "refuses (unless --allow-load); above it during a phase, every row that phase "
        "touches is flagged",
    )
    ap.add_argument(
        "--allow-load",
        action="store_true",
        help="run on a busy machine anyway (the loaded phases' rows are flagged)",
    )
    ap.add_argument(
        "--quiet-wait",
        type=float,
        default=d.quiet_wait_s,
        help="seconds a phase waits at most for a quiet second",
    )
    ap.add_argument(
        "--quiet-budget",
        type=float,
        default=d.quiet_budget_s,
        help="seconds the whole run waits at most for quiet",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    ap.add_argument(
        "--markdown", type=Path, default=MARKDOWN, help="the table (default bench/peer/RESULTS.md)"
    )
    ap.add_argument("--report", type=Path, help="only write the markdown of this JSON")
    a = ap.parse_args()
    cfg = Config(
        n=a.n, rounds=a.rounds, concurrency=a.concurrency, threads=a.threads, c1=a.c1,
        ck=a.ck, seed=a.seed, quality=not a.no_quality, max_other_load=a.max_other_load,
        allow_load=a.allow_load, quiet_wait_s=a.quiet_wait, quiet_budget_s=a.quiet_budget,
    )  # fmt: skip
    return cfg, a


def write_markdown(res: dict, path: Path) -> None:
    notes = ""
    if path.exists():
        old = path.read_text()
        if NOTES in old:
            notes = old[old.index(NOTES) :]
    path.write_text(report.markdown(res) + "\n" + (notes or NOTES + "\n"))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg, a = _args()
    if a.report:
        write_markdown(json.loads(a.report.read_text()), a.markdown)
        print(a.markdown)
        return
    # SIGTERM as Ctrl-C: run()'s finally stops every server it started.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    def say(msg: str) -> None:
        print(msg, flush=True)

    res = asyncio.run(run(cfg, say))
    a.out.mkdir(parents=True, exist_ok=True)
    host = res["machine"]["host"] or "host"
    out = a.out / f"peer-{datetime.now(UTC):%Y-%m-%d}-{host}.json"
    out.write_text(json.dumps(res, indent=1, default=str))
    write_markdown(res, a.markdown)
    print(report.markdown(res))
    print(f"wrote {out} and {a.markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
