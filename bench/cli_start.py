"""`python -m bench.cli_start` (`make bench-cli`): how long each `htm` command that needs no
model takes to print its first line, and `htm mcp` to answer `initialize`.

Each command runs as a user runs it (a new process, the default local model configured: a
command must not load it unless it embeds), against the bench's PostgreSQL and Redis (started
under .htm/bench/, or HTM_BENCH_DATABASE_URL / HTM_BENCH_REDIS_URL) on a fresh, migrated
database. RUNS runs each, interleaved; the figure is the median wall time from the process's
start to its first line of output (stdout or stderr), a floor beside it: `python -c pass`
with the same interpreter. Writes bench/results/cli-start.md.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.infra import Servers, fresh_database, offline_env
from bench.report import machine

RUNS = 5
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "cli-start.md"
NS = "bench-cli"
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass (the floor)", [sys.executable, "-c", "pass"]),
    ("htm --version", ["--version"]),
    ("htm migrate (nothing to do)", ["migrate"]),
    ("htm keys list", ["keys", "list", "--namespace", NS]),
    ("htm export", ["export", "--namespace", NS, "--out", "/tmp/htm-cli-start.jsonl"]),
    ("htm import of a missing file (fails)", ["import", "/tmp/htm-cli-start-missing.jsonl"]),
    ("htm load of a missing path (fails)", ["load", "/tmp/htm-cli-start-missing"]),
    ("htm dedupe --mode exact", ["dedupe", "--mode", "exact", "--namespace", NS]),
    ("htm retention --dry-run", ["retention", "--dry-run", "--namespace", NS]),
    ("htm maintenance", ["maintenance", "--namespace", NS]),
    (
        "an MCP client alone: Python and the SDK's import (the floor of the next row)",
        [sys.executable, "-c", "from mcp.client.stdio import stdio_client; print()"],
    ),
    (
        "htm mcp, until `initialize` is answered (the client's start included)",
        [sys.executable, "-m", "bench.mcp_initialize"],
    ),
]


def first_line_s(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from the start to the first byte of output (or the exit, for none)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=ROOT)  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.read(1)
    took = time.monotonic() - started
    proc.communicate(timeout=120)
    return took


def main() -> int:
    os.environ.update(offline_env())
    servers = Servers.start()
    try:
        url = asyncio.run(fresh_database(servers, "htm_bench_cli"))
        env = {**os.environ, "HTM_DATABASE_URL": url, "HTM_REDIS_URL": servers.redis_url,
               "HTM_EMBEDDING_PROVIDER": "local", "HTM_LOG_LEVEL": "warning"}  # fmt: skip
        htm = [sys.executable, "-m", "app.cli"]
        runs: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
        for _ in range(RUNS + 1):  # the first round warms the caches and is not counted
            for name, args in COMMANDS:
                argv = args if args[0] == sys.executable else [*htm, *args]
                runs[name].append(first_line_s(argv, env))
    finally:
        servers.stop()
    m = machine()
    lines = [
        f"# `htm` start-up, {datetime.now(UTC).isoformat(timespec='minutes')}",
        "",
        f"{m['cores']} cores, {m['cpu']}; the default local model configured; PostgreSQL and "
        f"Redis already running. Median of {RUNS} runs (after one warm-up round), from the "
        "process's start to its first line of output (`htm mcp`: to the answer to "
        "`initialize`, a client's start included). Bound (issue 34): 2 s.",
        "",
        "| command | first line, median s | min | max |",
        "|---|---:|---:|---:|",
    ]
    for name, times in runs.items():
        counted = times[1:]
        lines.append(
            f"| {name} | {statistics.median(counted):.2f} | {min(counted):.2f} | "
            f"{max(counted):.2f} |"
        )
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
