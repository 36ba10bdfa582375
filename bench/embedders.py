"""`python -m bench.embedders [--quick]`: the local model's runtimes and thread budgets side
by side — what the service's default (HTM_EMBEDDING_RUNTIME, HTM_EMBEDDING_THREADS) was
chosen by.

Each (runtime, threads, load) runs in a fresh process, building the embedder as the service
does (`OnnxEmbedder` / `LocalEmbedder`: one inference thread, unit vectors), on the bench's
texts (bench/dataset.py, seed 20260101):

- one text: a question embedded alone (a recall's query on a cache miss, a single add), p50
  and p90 of wall time, and the process's CPU per call;
- batch of 32 and of 64: memory contents in one call (the micro-batcher's batches under load;
  64 is HTM_EMBEDDING_BATCH_SIZE), wall ms per text, and texts per second.

Runtimes: torch (sentence-transformers), onnx (ONNX Runtime, the float model exported from the
same weights) and onnx-int8 (its dynamic int8 quantization), at 1 thread and at one per core
(torch's own default). "Under load" repeats them while `--hogs` other processes (default: one
per core) spin on the CPU, as PostgreSQL, Redis and the event loop do when the service is
busy: a model that asks for every core then waits for all of them.

Quality: every runtime embeds the recall eval's two sets (evals/: conversations and facts,
each memory's plain content and each question), and each question's top 10 within its group
(a dialogue, or the facts) by cosine is compared with torch's: agreement (shared hits / 10,
mean), recall@10 of the evidence, and "mixed": this runtime's questions against torch's stored
vectors, what a database gets when the runtime changes and nothing is re-embedded.

Writes bench/results/embedders.md (and .json beside it, ignored by git).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.dataset import scale_memories, scale_questions
from bench.infra import offline_env
from bench.report import machine

RESULTS = Path(__file__).parent / "results"
SEED = 20260101
MODEL, DIM = "all-MiniLM-L6-v2", 384
RUNTIMES = ("torch", "onnx", "onnx-int8")
MODELS_DIR = Path(__file__).resolve().parent.parent / ".htm" / "models"
# Two hits whose torch scores differ by less than this are a tie: float32 through another
# kernel library moves a score by up to ~1e-3 (cosine 0.9999995 between the two vectors).
TIE = 1e-3


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _hog() -> None:  # pragma: no cover - a process that only burns CPU
    while True:
        pass


async def _embedder(runtime: str, threads: int) -> Any:
    from app.embeddings.local import LocalEmbedder
    from app.embeddings.onnx_model import OnnxEmbedder

    if runtime == "torch":
        return await LocalEmbedder.create(MODEL, DIM, threads=threads)
    return await OnnxEmbedder.create(
        MODEL, DIM, models_dir=MODELS_DIR, threads=threads, quantized=runtime == "onnx-int8"
    )


async def measure(runtime: str, threads: int, hogs: int, quick: bool) -> dict[str, Any]:
    """One runtime at one thread count, in this process (a worker: see `main`)."""
    embedder = await _embedder(runtime, threads)
    spinners = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(hogs)]
    for s in spinners:
        s.start()
    questions = scale_questions(SEED, 400).texts
    memories = scale_memories(SEED, 640).contents
    out: dict[str, Any] = {"runtime": runtime, "threads": threads, "hogs": hogs}
    try:
        await embedder.embed(questions[:8])  # warm-up
        wall, cpu = [], []
        for q in questions[: 40 if quick else 200]:
            w0, c0 = time.perf_counter(), time.process_time()
            await embedder.embed([q])
            wall.append((time.perf_counter() - w0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        wall.sort()
        out["one"] = {
            "p50_ms": statistics.median(wall),
            "p90_ms": wall[round(0.9 * (len(wall) - 1))],
            "cpu_ms": statistics.median(cpu),
        }
        for size in (32, 64):
            per_text = []
            reps = 2 if quick else 10
            for r in range(reps):
                batch = memories[(r * size) % 576 : (r * size) % 576 + size]
                w0 = time.perf_counter()
                await embedder.embed(batch)
                per_text.append((time.perf_counter() - w0) * 1000 / size)
            ms = statistics.median(per_text)
            out[f"batch{size}"] = {"ms_per_text": ms, "texts_per_s": 1000 / ms}
    finally:
        for s in spinners:
            s.terminate()
        await embedder.aclose()
    return out


def quality_vectors(runtime: str, into: Path) -> None:
    """Embed the eval's sets with `runtime` into `into/<set>-{docs,questions}.npy`."""
    import numpy as np

    from evals.sets import conv_set, facts_set

    async def run() -> None:
        embedder = await _embedder(runtime, 1)
        try:
            for es in (conv_set(mode="docs"), facts_set(mode="docs")):
                docs = [d.content for g in es.groups.values() for d in g]
                questions = [q.text for q in es.questions]
                for name, texts in (("docs", docs), ("questions", questions)):
                    vectors = []
                    for i in range(0, len(texts), 64):
                        vectors += await embedder.embed(texts[i : i + 64])
                    np.save(into / f"{es.name}-{name}.npy", np.array(vectors, dtype=np.float32))
        finally:
            await embedder.aclose()

    asyncio.run(run())


def compare(into: Path) -> dict[str, Any]:
    """Agreement and recall@10 of each runtime against torch, per eval set."""
    import numpy as np

    from evals.sets import conv_set, facts_set

    out: dict[str, Any] = {}
    for es in (conv_set(mode="docs"), facts_set(mode="docs")):
        docs = [d for g in es.groups.values() for d in g]
        group_of = [g for g, ds in es.groups.items() for _ in ds]
        indexes: dict[str, list[int]] = {}
        for i, g in enumerate(group_of):
            indexes.setdefault(g, []).append(i)
        members = {g: np.array(ix) for g, ix in indexes.items()}

        def load(rt: str, name: str, set_name: str = es.name) -> Any:
            return np.load(into / rt / f"{set_name}-{name}.npy")

        def ranked(d: Any, q: Any, qi: int, ix: Any) -> tuple[list[int], Any]:
            scores = d[ix] @ q[qi]
            return [int(x) for x in ix[np.argsort(-scores, kind="stable")[:10]]], scores

        base_d, base_q = load("torch", "docs"), load("torch", "questions")
        rows: dict[str, Any] = {}
        for rt in RUNTIMES:
            d, q = load(rt, "docs"), load(rt, "questions")
            agree, tied, mixed, recall, mixed_recall = [], [], [], [], []
            for qi, question in enumerate(es.questions):
                ix = members[question.group]
                ref, base_scores = ranked(base_d, base_q, qi, ix)
                mine, _ = ranked(d, q, qi, ix)
                cross, _ = ranked(base_d, q, qi, ix)
                tenth = float(np.sort(base_scores)[::-1][min(9, len(ix) - 1)])
                agree.append(len(set(ref) & set(mine)) / 10)
                # a hit torch scores as high as its own 10th (within TIE) is one of its top 10
                tied.append(sum(float(base_d[i] @ base_q[qi]) >= tenth - TIE for i in mine) / 10)
                mixed.append(len(set(ref) & set(cross)) / 10)
                evidence = set(question.evidence)
                for hits, into_list in ((mine, recall), (cross, mixed_recall)):
                    found = {docs[i].key for i in hits} & evidence
                    into_list.append(len(found) / len(evidence))
            rows[rt] = {
                "agreement": float(np.mean(agree)),
                "agreement_with_ties": float(np.mean(tied)),
                "recall_at_10": float(np.mean(recall)),
                "mixed_agreement": float(np.mean(mixed)),
                "mixed_recall_at_10": float(np.mean(mixed_recall)),
                "min_cosine_to_torch": float((d * base_d).sum(axis=1).min()),
            }
        out[es.name] = {"questions": len(es.questions), "memories": len(docs), "rows": rows}
    return out


def worker(runtime: str, threads: int, hogs: int, quick: bool) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.embedders", "--worker", f"{runtime}:{threads}:{hogs}"]
    done = subprocess.run(
        args + (["--quick"] if quick else []),
        env=offline_env(),
        stdout=subprocess.PIPE,
        check=True,
        timeout=1800,
    )
    r: dict[str, Any] = json.loads(done.stdout)
    say(
        f"  {runtime}, {threads} thread(s), {hogs} hog(s): one text {r['one']['p50_ms']:.1f} ms "
        f"p50, batch of 64 {r['batch64']['texts_per_s']:.0f} texts/s"
    )
    return r


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    v = results["versions"]
    lines = [
        "# The local model's runtimes and thread budgets",
        "",
        f"`python -m bench.embedders{' --quick' if results['quick'] else ''}` on "
        f"{results['date']}: {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"{MODEL}; torch {v['torch']}, sentence-transformers {v['sentence_transformers']}, "
        f"onnxruntime {v['onnxruntime']}. Load average at the start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_start'])}. Each row in a fresh process "
        "built as the service builds it; one text: p50 / p90 of single calls; batches: the "
        "median of repeated calls. Under load: one CPU-spinning process per core beside it.",
        "",
        "| runtime | threads | load | one text p50 ms | p90 ms | CPU ms | batch of 32, "
        "ms/text | batch of 64, texts/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        load = f"{r['hogs']} spinning" if r["hogs"] else "idle"
        lines.append(
            f"| {r['runtime']} | {r['threads']} | {load} | {r['one']['p50_ms']:.1f} | "
            f"{r['one']['p90_ms']:.1f} | {r['one']['cpu_ms']:.1f} | "
            f"{r['batch32']['ms_per_text']:.2f} | {r['batch64']['texts_per_s']:.0f} |"
        )
    lines += [
        "",
        "What each runtime finds, against torch's vectors (the eval's sets, plain contents, "
        "top 10 per question within its dialogue or the facts, by cosine):",
        "",
        "| set | runtime | top-10 agreement | with ties | recall@10 | mixed: agreement | "
        "mixed: recall@10 | min cosine to torch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in results["quality"].items():
        for rt, q in s["rows"].items():
            lines.append(
                f"| {name} ({s['memories']} memories, {s['questions']} questions) | {rt} | "
                f"{q['agreement']:.4f} | {q['agreement_with_ties']:.4f} | "
                f"{q['recall_at_10']:.4f} | {q['mixed_agreement']:.4f} "
                f"| {q['mixed_recall_at_10']:.4f} | {q['min_cosine_to_torch']:.6f} |"
            )
    lines += [
        "",
        f"With ties: a hit counts as agreeing when torch scores it within {TIE} of torch's "
        'own 10th hit (the conversations hold many equal short turns, "Hey!", "Haha, '
        'yeah.", whose order among themselves is decided by float noise). '
        "Mixed: this runtime's question vectors against torch's stored vectors (a database "
        "left as it was after a change of runtime). The service runs at the "
        "thread budget of app/embeddings/factory.py (`default_threads`: 1 on up to 2 cores); "
        "`onnx-int8` (the default on a new database since 2026-12-07) records its vectors as "
        "`<model>@int8v2`, so `htm reembed` re-embeds a database made with another runtime.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.embedders", description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="spinners under load")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", help=argparse.SUPPRESS)  # RUNTIME:THREADS:HOGS, JSON on stdout
    p.add_argument("--vectors", help=argparse.SUPPRESS)  # RUNTIME:DIR
    args = p.parse_args(argv)
    os.environ.update(offline_env())
    if args.worker:
        runtime, threads, hogs = args.worker.split(":")
        print(json.dumps(asyncio.run(measure(runtime, int(threads), int(hogs), args.quick))))
        return 0
    if args.vectors:
        runtime, _, where = args.vectors.partition(":")
        quality_vectors(runtime, Path(where))
        return 0

    import onnxruntime
    import sentence_transformers
    import torch

    cores = os.cpu_count() or 1
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": {
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        "quick": args.quick,
        "runs": [],
    }
    plan = [(rt, t, 0) for rt in RUNTIMES for t in sorted({1, cores})]
    plan += [(rt, t, args.hogs) for rt in ("torch", "onnx") for t in sorted({1, cores})]
    for runtime, threads, hogs in plan:
        results["runs"].append(worker(runtime, threads, hogs, args.quick))
    with tempfile.TemporaryDirectory() as scratch:
        for rt in RUNTIMES:
            say(f"  {rt}: the eval's sets")
            (Path(scratch) / rt).mkdir()
            subprocess.run(
                [sys.executable, "-m", "bench.embedders", "--vectors", f"{rt}:{scratch}/{rt}"],
                env=offline_env(),
                check=True,
                timeout=3600,
            )
        results["quality"] = compare(Path(scratch))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embedders.json").write_text(json.dumps(results, indent=1))
    (args.out / "embedders.md").write_text(markdown(results))
    say(f"wrote {args.out / 'embedders.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
