"""Closed-loop load: K workers on one event loop, each awaiting one call at a time.

Every phase is bounded twice: by a request count and by a deadline (plus a hard timeout
that cancels whatever is still running). Latency is taken around the awaited call only;
request bodies are encoded before the phase starts, so the client's JSON work is not timed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bench.infra import CpuMeter

Call = Callable[[int, Any], Awaitable[Any]]  # (worker, request index or prepared argument)
Prepare = Callable[[int, int], Any]  # (worker, request index) -> the call's argument

# A phase that outlives its deadline by this much is cancelled (a hung request, a lock).
HARD_GRACE_S = 60.0


@dataclass(frozen=True)
class Limits:
    max_requests: int
    max_seconds: float
    warmup: int
    # A slow operation gets up to MIN_EXTENSION x max_seconds to reach this many samples.
    min_requests: int = 0


MIN_EXTENSION = 8.0


@dataclass
class PhaseResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    throughput: float  # successful requests per second
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    max_ms: float | None
    first_error: str | None = None
    timed_out: bool = False
    cpu_ms: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(latencies_s: list[float]) -> dict[str, float | None]:
    if not latencies_s:
        return {k: None for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms", "max_ms")}
    ms = np.asarray(latencies_s) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {
        "p50_ms": float(p50),
        "p95_ms": float(p95),
        "p99_ms": float(p99),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
    }


async def closed_loop(
    call: Call,
    concurrency: int,
    limits: Limits,
    meter: CpuMeter | None = None,
    prepare: Prepare | None = None,
) -> PhaseResult:
    """Warm up (untimed), then run until max_requests or max_seconds, whichever comes first.

    With `prepare`, each call's argument is built by prepare(worker, index) before its timer
    starts (fresh data per request that would be too large to build for every request up
    front); otherwise the call gets the request index."""

    def arg(w: int, i: int) -> Any:
        return prepare(w, i) if prepare is not None else i

    for i in range(limits.warmup):
        await call(i % concurrency, arg(i % concurrency, i))

    latencies: list[float] = []
    errors: list[str] = []
    issued = limits.warmup
    stop_at = limits.warmup + limits.max_requests
    deadline = hard_deadline = 0.0

    def more() -> bool:
        now = time.perf_counter()
        if issued >= stop_at or now >= hard_deadline:
            return False
        return now < deadline or len(latencies) + len(errors) < limits.min_requests

    async def worker(w: int) -> None:
        nonlocal issued
        while more():
            i = issued
            issued += 1
            a = arg(w, i)
            t0 = time.perf_counter()
            try:
                await call(w, a)
            except Exception as exc:  # counted and reported, never silently dropped
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(time.perf_counter() - t0)

    before = await meter.sample() if meter else None
    start = time.perf_counter()
    deadline = start + limits.max_seconds
    hard_deadline = start + limits.max_seconds * MIN_EXTENSION
    timed_out = False
    tasks = [asyncio.create_task(worker(w)) for w in range(concurrency)]
    try:
        async with asyncio.timeout(limits.max_seconds * MIN_EXTENSION + HARD_GRACE_S):
            await asyncio.gather(*tasks)
    except TimeoutError:
        timed_out = True
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = time.perf_counter() - start
    after = await meter.sample() if meter else None

    done = len(latencies)
    result = PhaseResult(
        concurrency=concurrency,
        requests=done,
        errors=len(errors),
        seconds=elapsed,
        throughput=done / elapsed if elapsed > 0 else 0.0,
        first_error=errors[0] if errors else None,
        timed_out=timed_out,
        **summarize(latencies),  # type: ignore[arg-type]
    )
    if before is not None and after is not None:
        result.cpu_ms = CpuMeter.per_request(before, after, done + len(errors), elapsed)
    return result


async def interleaved(
    calls: list[tuple[str, Call]],
    limits: Limits,
    prepare: Prepare | None = None,
) -> dict[str, PhaseResult]:
    """Sequential (c=1) latency of several ways to do one operation, request by request in
    rotating order (service, floor, core; then floor, core, service; ...), so that drift over
    time (a growing table, WAL segments, a checkpoint, other work) falls on all of them alike
    instead of on whichever phase ran second. Limits apply per way; no CPU split here."""
    names = [n for n, _ in calls]
    latencies: dict[str, list[float]] = {n: [] for n in names}
    errors: dict[str, list[str]] = {n: [] for n in names}

    def arg(i: int) -> Any:
        return prepare(0, i) if prepare is not None else i

    for i in range(limits.warmup):
        for _, call in calls:
            await call(0, arg(i))

    ways = len(calls)
    start = time.perf_counter()
    deadline = start + limits.max_seconds * ways
    hard_deadline = start + limits.max_seconds * ways * MIN_EXTENSION
    timed_out = False
    rounds = 0
    try:
        async with asyncio.timeout(limits.max_seconds * ways * MIN_EXTENSION + HARD_GRACE_S):
            while rounds < limits.max_requests:
                now = time.perf_counter()
                done = min(len(latencies[n]) + len(errors[n]) for n in names)
                if now >= hard_deadline or (now >= deadline and done >= limits.min_requests):
                    break
                i = limits.warmup + rounds
                for k in range(ways):
                    name, call = calls[(rounds + k) % ways]
                    a = arg(i)
                    t0 = time.perf_counter()
                    try:
                        await call(0, a)
                    except Exception as exc:
                        errors[name].append(f"{type(exc).__name__}: {exc}"[:300])
                        continue
                    latencies[name].append(time.perf_counter() - t0)
                rounds += 1
    except TimeoutError:
        timed_out = True
    elapsed = time.perf_counter() - start
    out = {}
    for name in names:
        done = len(latencies[name])
        busy = sum(latencies[name])
        out[name] = PhaseResult(
            concurrency=1,
            requests=done,
            errors=len(errors[name]),
            seconds=elapsed,
            throughput=done / busy if busy > 0 else 0.0,  # 1 / mean latency at c=1
            first_error=errors[name][0] if errors[name] else None,
            timed_out=timed_out,
            **summarize(latencies[name]),  # type: ignore[arg-type]
        )
    return out
