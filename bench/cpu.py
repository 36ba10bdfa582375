"""The service's CPU per request without HTTP: the app driven through ASGI in this process.

`python -m bench.cpu DATABASE_URL REDIS_URL [vector|hybrid|add] [N]` (issue 46): builds the
app as `htm serve` does (uvloop, the same settings, `gc.freeze()` after start-up), sends 50
warm-up requests, then N requests one at a time, and prints the process's CPU per request
(user and system). The database should be a bench database (`--keep-databases`, N = 10,000).

On a machine shared with other work, CPU time moves by ±20 % from run to run; under
callgrind the count of instructions does not:

    valgrind --tool=callgrind --instr-atstart=no python -m bench.cpu URL REDIS vector 100

(the timed loop switches instrumentation on and off itself: `HTM_BENCH_CALLGRIND=1`). The
adds' contents are new on every run (the process id in them), so exact dedupe never answers
from an earlier run's rows. `--profile PATH` writes a cProfile of the timed loop.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench import dataset
from bench.base import vec_json


def bodies(op: str, n: int, seed: int) -> list[bytes]:
    qs = dataset.scale_questions(seed, 200)
    if op == "add":
        fresh = dataset.fresh_vectors(seed, 5000, 7)
        pid = os.getpid()
        return [
            (
                f'{{"key":"cpu-{pid}-{i}",'
                f'"content":{json.dumps(f"cpu note {pid}-{i}: {qs.texts[i % 200]}")},'
                f'"embedding":{vec_json(fresh[i % 5000])}}}'
            ).encode()
            for i in range(n)
        ]
    out = []
    for i in range(n):
        body = {"query": qs.texts[i % 200], "strategy": op, "limit": 10}
        body["load_into_working_memory"] = False
        raw = json.dumps(body)
        out.append((raw[:-1] + f',"embedding":{vec_json(qs.vectors[i % 200])}}}').encode())
    return out


async def call(app: Any, path: str, raw: bytes) -> None:
    sent: list[dict[str, Any]] = []
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"host", b"bench"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    if sent[0]["status"] not in (200, 201):
        raise RuntimeError(f"{sent[0]['status']}: {sent[1]['body'][:300]!r}")


async def run(op: str, n: int, seed: int, profile: str | None) -> str:
    from app.config import get_settings
    from app.main import create_app

    app = create_app(get_settings(), background=False)
    path = "/v1/robots/cpu-writer/memories" if op == "add" else "/v1/robots/cpu-reader/recall"
    requests = bodies(op, n + 50, seed)
    async with app.router.lifespan_context(app):
        for raw in requests[:50]:
            await call(app, path, raw)
        gc.collect()
        gc.freeze()  # as the serving process does (app/main.py)
        callgrind = os.environ.get("HTM_BENCH_CALLGRIND") == "1"
        if callgrind:  # blocking on purpose: counting starts before the first request
            subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=False)  # noqa: ASYNC221
        profiler = cProfile.Profile() if profile else None
        t0, w0 = os.times(), time.perf_counter()
        if profiler:
            profiler.enable()
        for raw in requests[50:]:
            await call(app, path, raw)
        if profiler:
            profiler.disable()
        t1, w1 = os.times(), time.perf_counter()
        if callgrind:
            subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=False)  # noqa: ASYNC221
        if profiler and profile:
            profiler.dump_stats(profile)
    user, system = (t1.user - t0.user) * 1000 / n, (t1.system - t0.system) * 1000 / n
    return (
        f"{op}: {n} requests, CPU {user + system:.3f} ms/req (user {user:.3f}, "
        f"system {system:.3f}), wall {(w1 - w0) * 1000 / n:.3f} ms/req"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__)
    p.add_argument("database_url")
    p.add_argument("redis_url")
    p.add_argument("op", nargs="?", default="vector", choices=("vector", "hybrid", "add"))
    p.add_argument("n", nargs="?", type=int, default=500)
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--profile", default=None)
    args = p.parse_args(argv)
    os.environ.update(
        HTM_DATABASE_URL=args.database_url,
        HTM_REDIS_URL=args.redis_url,
        HTM_LOG_LEVEL="warning",
        HTM_EMBEDDING_PROVIDER="none",
    )
    import uvloop

    print(uvloop.run(run(args.op, args.n, args.seed, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
