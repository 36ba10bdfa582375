"""`python -m bench.models [--model NAME_OR_PATH ...] [--quick]`: what a local embedding
model costs the service, per add and per recall.

Each model is loaded as the service loads it (`LocalEmbedder.create`: its own inference
thread, unit vectors) and timed on the bench's own texts (`bench/dataset.py`, seed 20260101):

- add, one text: one memory's content embedded alone (a single add, or a recall's query
  embedding when the query cache misses; a question is timed separately below);
- add, batch of 100: one `memories/batch` call's contents, embedded as one call;
- recall, one query: one natural-language question.

Each is run with torch's intra-op threads at 1 and at torch's default (the number of cores),
after a warm-up, as the median of several repetitions: wall time, and the CPU time of the
whole process (all threads), both in ms. The model's load time (an unpack of a packaged
model's archive excluded: it is timed before) and the process's resident memory after loading
it are reported too. Writes bench/results/models.md (and .json beside it: ignored by git).

`--eval` instead measures what each model finds: the recall eval's conversational set
(evals/, loaded and asked through the HTTP API by evals.runner, unchanged) against a service
running that model, each in a fresh database migrated for its dimension, on PostgreSQL and
Redis of its own under .htm/bench-models/. Writes bench/results/models-eval.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.dataset import scale_memories, scale_questions
from bench.infra import offline_env
from bench.report import machine

RESULTS = Path(__file__).parent / "results"
SEED = 20260101
MODELS = [("all-MiniLM-L6-v2", 384), ("all-mpnet-base-v2", 768)]
# (name, texts per call, repetitions; quick repetitions)
OPS = [
    ("add, one text", 1, 40, 8),
    ("add, batch of 100", 100, 6, 2),
    ("recall, one query", 1, 40, 8),
]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def timed(call: Callable[[], Awaitable[Any]], reps: int) -> dict[str, float]:
    """Median (and p90) wall and process-CPU ms of `reps` calls, after one warm-up call."""
    await call()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        await call()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    wall.sort()
    cpu.sort()
    p90 = min(len(wall) - 1, round(0.9 * (len(wall) - 1)))
    return {
        "wall_ms": statistics.median(wall),
        "cpu_ms": statistics.median(cpu),
        "wall_p90_ms": wall[p90],
        "cpu_p90_ms": cpu[p90],
    }


async def measure(model: str, dimension: int, threads: int, quick: bool) -> dict[str, Any]:
    """One model at one thread count, in this process (a worker: see `main`)."""
    import sentence_transformers  # noqa: F401 (imported before the load is timed)
    import torch

    from app.embeddings import packaged
    from app.embeddings.local import DEFAULT_MODELS_DIR, LocalEmbedder

    # Before any thread runs torch: each thread takes the count when it first runs an op.
    torch.set_num_threads(threads)
    await asyncio.to_thread(packaged.resolve, model, DEFAULT_MODELS_DIR)  # unpacked, if packaged
    rss0 = rss_mib()
    t0 = time.perf_counter()
    embedder = await LocalEmbedder.create(model, dimension)
    out: dict[str, Any] = {
        "model": embedder.model,
        "dimension": dimension,
        "threads": await asyncio.to_thread(torch.get_num_threads),
        "load_s": time.perf_counter() - t0,
        "ops": {},
    }
    memories = scale_memories(SEED, 200).contents
    questions = scale_questions(SEED, 100).texts
    try:
        for name, size, reps, quick_reps in OPS:
            pool = questions if name.startswith("recall") else memories
            cursor = [0]

            async def call(
                pool: list[str] = pool, size: int = size, cursor: list[int] = cursor
            ) -> Any:
                i = cursor[0]
                cursor[0] = (i + size) % len(pool)  # new texts each call
                return await embedder.embed((pool + pool)[i : i + size])

            out["ops"][name] = await timed(call, quick_reps if quick else reps)
    finally:
        await embedder.aclose()
    out["rss_mib"] = rss_mib() - rss0  # the weights are mapped lazily: read after the work
    return out


def unpack_time(model: str) -> float | None:
    """Seconds to unpack a packaged model's split archive (what its first start pays), into a
    scratch folder; None for a model that is a plain folder."""
    import tempfile

    from app.embeddings import packaged

    if packaged.canonical(model) != packaged.MPNET:
        return None
    parts, _ = packaged.split_parts(packaged.MPNET_PARTS)
    with tempfile.TemporaryDirectory(dir=RESULTS.parent.parent / ".htm") as scratch:
        t0 = time.perf_counter()
        packaged.unpack_split_zip(parts, Path(scratch) / "m", packaged.MPNET)
        return time.perf_counter() - t0


def worker(model: str, dimension: int, threads: int, quick: bool) -> dict[str, Any]:
    """Run `measure` in a fresh process: torch's thread count and the resident memory are
    then those of that model alone."""
    args = [sys.executable, "-m", "bench.models", "--worker", f"{model}:{dimension}:{threads}"]
    done = subprocess.run(
        args + (["--quick"] if quick else []),
        env=offline_env(),
        stdout=subprocess.PIPE,
        check=True,
        timeout=1800,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    for name, r in result["ops"].items():
        say(f"  {model}, {threads} thread(s), {name}: {r['wall_ms']:.1f} ms wall, "
            f"{r['cpu_ms']:.1f} ms CPU")  # fmt: skip
    return result


async def recall_eval(model: str, dimension: int) -> dict[str, Any]:
    """R@10 and MRR of the baseline strategies on the conv set, with `model` embedding."""
    from app.config import get_settings
    from app.embedded.postgres import EmbeddedPostgres
    from app.embedded.redis_server import EmbeddedRedis
    from bench.http import Http
    from bench.infra import BENCH_DIR, Servers, ServiceProcess, drop_database, fresh_database
    from evals.runner import BASELINE, load, run_config
    from evals.sets import conv_set

    home = BENCH_DIR.parent / "bench-models"
    pg = EmbeddedPostgres(home / "pgdata", database="postgres").start()
    redis = EmbeddedRedis(home / "redis", persistent=False).start()
    servers = Servers(server_url=pg.url("postgres"), redis_url=redis.url, pg=pg, redis=redis)
    service = None
    os.environ["HTM_EMBEDDING_DIMENSION"] = str(dimension)  # what the migration reads
    get_settings.cache_clear()
    try:
        url = await fresh_database(servers, "htm_models_eval")
        service = ServiceProcess(
            url,
            servers.redis_url,
            home / f"service-{dimension}.log",
            embedding_provider="local",
            embedding_model=model,
            embedding_dimension=str(dimension),
            # A batch of 100 with the larger model can outlast the default 10 s on 2 busy
            # cores; the eval wants every memory embedded when its batch answers.
            embedding_timeout_s="120",
        )
        await service.start(limit_s=600)
        evalset = conv_set()
        out: dict[str, Any] = {"model": model, "dimension": dimension, "configs": {}}
        async with Http(service.base_url, 8, timeout_s=600.0) as client:
            t0 = time.perf_counter()
            out["memories"] = await load(client, evalset, prefix="eval-")
            out["load_s"] = time.perf_counter() - t0
            for config in BASELINE:
                r = await run_config(client, evalset, config, prefix="eval-", concurrency=4)
                out["configs"][config.name] = r
                say(f"  {model} {config.name}: R@10 {r['all']['recall_at_10']:.3f}")
        return out
    finally:
        del os.environ["HTM_EMBEDDING_DIMENSION"]
        get_settings.cache_clear()
        if service is not None:
            service.stop()
        try:
            await drop_database(servers, "htm_models_eval")
        finally:
            servers.stop()


def eval_markdown(results: dict[str, Any]) -> str:
    runs = results["models"]
    m = results["machine"]
    lines = [
        "# Local embedding models: what recall finds with each",
        "",
        f"`python -m bench.models --eval` on {results['date']}: {m['cores']} cores "
        f"({m['cpu']}), load average at the start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_start'])}. The recall eval's "
        f"conversational set (evals/: {runs[0]['memories']} turns, "
        f"{runs[0]['configs']['hybrid']['all']['questions']} questions), loaded and asked "
        "through the HTTP API with each model, in a database migrated for its dimension; the "
        "service's other settings at their defaults. Recall@10 (MRR@10), all questions, "
        "then the dev / test split.",
        "",
        "| model | " + " | ".join(runs[0]["configs"]) + " | load s |",
        "|---|" + "---|" * (len(runs[0]["configs"]) + 1),
    ]
    for run in runs:
        cells = []
        for r in run["configs"].values():
            a, split = r["all"], r["split"]
            cells.append(
                f"{a['recall_at_10']:.3f} ({a['mrr']:.3f}); {split['dev']['recall_at_10']:.3f} "
                f"/ {split['test']['recall_at_10']:.3f}"
            )
        lines.append(f"| {run['model']} | " + " | ".join(cells) + f" | {run['load_s']:.0f} |")
    kinds = runs[0]["configs"]["hybrid"]["kind"]
    lines += [
        "",
        "Hybrid's recall@10 by question kind:",
        "",
        "| kind | questions | " + " | ".join(r["model"] for r in runs) + " |",
        "|---|---|" + "---|" * len(runs),
    ]
    for kind, k in kinds.items():
        values = " | ".join(
            f"{r['configs']['hybrid']['kind'][kind]['recall_at_10']:.3f}" for r in runs
        )
        lines.append(f"| {kind} | {k['questions']} | {values} |")
    lines += [
        "",
        "Load s: the whole set through `memories/batch` (100 a call), embedding included, on a "
        "machine shared with other work; latencies are in models-eval.json (not committed).",
        "",
    ]
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    models = results["models"]
    base = models[0]
    m = results["machine"]
    lines = [
        "# Local embedding models: cost per add and per recall",
        "",
        f"`python -m bench.models{' --quick' if results['quick'] else ''}` on "
        f"{results['date']}: {m['cores']} cores ({m['cpu']}), Python {m['python']}, torch "
        f"{results['torch']}, sentence-transformers {results['sentence_transformers']}; load "
        f"average at the start {', '.join(f'{x:.2f}' for x in m['loadavg_start'])}. Each "
        "model and thread count in a fresh process, as the service runs it (`LocalEmbedder`); "
        "the median of repeated calls after a warm-up. CPU is the whole process's, every "
        "thread's: with other work on the machine, wall time includes waiting for a core, and "
        f"CPU time is the steadier figure. Ratios (×) are against {base['model']} at the same "
        "thread count.",
        "",
        "| model | dim | operation | torch threads | wall ms | CPU ms | wall × | CPU × |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in models:
        for threads, run in model["runs"].items():
            for name, r in run["ops"].items():
                b = base["runs"][threads]["ops"][name]
                lines.append(
                    f"| {model['model']} | {model['dimension']} | {name} | {run['threads']} | "
                    f"{r['wall_ms']:.1f} | {r['cpu_ms']:.1f} | "
                    f"{r['wall_ms'] / b['wall_ms']:.1f} | {r['cpu_ms'] / b['cpu_ms']:.1f} |"
                )
    lines += [
        "",
        "| model | dim | load s | resident memory MiB | first start: unpack s | "
        "stored vector, halfvec / vector |",
        "|---|---|---|---|---|---|",
    ]
    for model in models:
        d = model["dimension"]
        run = next(iter(model["runs"].values()))
        unpack = "-" if model["unpack_s"] is None else f"{model['unpack_s']:.1f}"
        lines.append(
            f"| {model['model']} | {d} | {run['load_s']:.1f} | {run['rss_mib']:.0f} | "
            f"{unpack} | {2 * d + 8} B / {4 * d + 8} B |"
        )
    lines += [
        "",
        "Resident memory: what the process grew by from before the load to after the calls "
        "(1 thread). Unpack: a packaged model split over several packages "
        "(all-mpnet-base-v2) is unpacked once, at the first start after it is installed "
        "(`app/embeddings/packaged.py`). A stored vector is memory.embedding's size, before "
        "the HNSW index's copy. p90s are in models.json beside this file (not committed).",
        "",
    ]
    return "\n".join(lines)


def parse_model(spec: str) -> tuple[str, int]:
    name, _, dim = spec.rpartition(":")
    return (name, int(dim)) if name and dim.isdigit() else (spec, 384)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__)
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME_OR_PATH[:DIM]",
        help="a model to compare, repeatable (the first is the ratios' base); default: "
        + ", ".join(f"{n}:{d}" for n, d in MODELS),
    )
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--eval", action="store_true", help="recall@10 on evals' conv set instead")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", help=argparse.SUPPRESS)  # NAME:DIM:THREADS, JSON on stdout
    args = p.parse_args(argv)
    os.environ.update(offline_env())
    if args.worker:
        spec, _, threads = args.worker.rpartition(":")
        name, dim = parse_model(spec)
        print(json.dumps(asyncio.run(measure(name, dim, int(threads), args.quick))))
        return 0
    models = [parse_model(s) for s in args.model] if args.model else MODELS

    import sentence_transformers
    import torch

    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "quick": args.quick,
        "models": [],
    }
    if args.eval:
        for name, dim in models:
            say(f"{name} ({dim} dimensions): the conv set")
            results["models"].append(asyncio.run(recall_eval(name, dim)))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "models-eval.json").write_text(json.dumps(results, indent=2) + "\n")
        md = eval_markdown(results)
        (args.out / "models-eval.md").write_text(md)
        print(md)
        return 0
    cores = torch.get_num_threads()  # torch's default: one thread per core
    for name, dim in models:
        say(f"{name} ({dim} dimensions)")
        unpack = unpack_time(name)
        runs = {str(t): worker(name, dim, t, args.quick) for t in sorted({1, cores})}
        results["models"].append(
            {"model": name, "dimension": dim, "unpack_s": unpack, "runs": runs}
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.json").write_text(json.dumps(results, indent=2) + "\n")
    md = markdown(results)
    (args.out / "models.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
