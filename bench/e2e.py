"""Recall with the model in the loop: the request carries only its text, and the service's
local model (all-MiniLM-L6-v2) embeds it, beside the same recall with a client vector.

After a scale run's reads, a second service process (`HTM_EMBEDDING_PROVIDER=local`, the
scale run's other settings) is started on the same database, so it searches exactly the N
memories the client-vector rows searched. Unfiltered vector and hybrid recall, three ways:

- **client vector**: the request carries the 384-float vector, as in the scale table (the
  same questions and vectors as `recall_<strategy>_all`);
- **cached**: the text only, one of `CACHED_QUESTIONS` questions asked before, so its
  vector comes from the service's query-embedding cache (app/embeddings/query_cache.py);
- **fresh**: the text only, a question this service process has never been asked (every
  request a different one: `dataset.distinct_questions`), so the model embeds it, through
  the micro-batcher, as a new question is.

At c=1 the three run request by request in rotating order (`driver.interleaved`); at c=K
each in turn (`driver.closed_loop`). The service's own cache counters (GET /v1/stats) are
read around every phase, so the report can show that fresh requests missed the cache and
cached ones hit it. Fresh and cached questions come from one generator, so fresh − cached is
the model's share; cached − client vector is what remains (the model's query vectors are
not in the latent space of the bench's client vectors, so the HNSW walk can differ, and
hybrid's full-text list sees other words). Every way asks with `min_score: 0` (see `_body`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from bench import dataset
from bench.base import JSON, RECALL_LIMIT, Profile, QuietBudget, check_status, vec_json
from bench.driver import closed_loop, interleaved
from bench.http import Http
from bench.infra import BENCH_DIR, CpuMeter, Servers, ServiceProcess, wait_for_quiet

log = logging.getLogger("bench")

STRATEGIES = ("vector", "hybrid")
OPS = tuple(f"recall_{s}_e2e" for s in STRATEGIES)
WAYS = ("client_vector", "cached", "fresh")
CACHED_QUESTIONS = 200


def _fresh_per_strategy(p: Profile) -> int:
    """Fresh questions one strategy can use: every request of its c=1 and c=K phases."""
    return p.c1.warmup + p.c1.max_requests + p.ck.warmup + p.ck.max_requests


def _body(strategy: str, text: str, vector_json: str | None = None) -> bytes:
    body = {
        "query": text,
        "strategy": strategy,
        "limit": RECALL_LIMIT,
        "load_into_working_memory": False,
        # The bench's stored vectors are not the model's, so the model's question vectors
        # are near none of them and the default relevance floor would drop every hit: at 0
        # each way answers its 10 hits (the floor filters after the search, in Python).
        "min_score": 0,
    }
    raw = json.dumps(body)
    if vector_json is not None:
        raw = raw[:-1] + f',"embedding":{vector_json}}}'
    return raw.encode()


async def _cache_counts(client: Http) -> dict[str, int]:
    c = check_status(await client.get("/v1/stats"), 200).json()["query_embedding_cache"]
    return {"hits": c["hits"], "misses": c["misses"], "entries": c["entries"]}


async def run_e2e(
    servers: Servers,
    profile: Profile,
    n: int,
    url: str,
    seed: int,
    quiet: QuietBudget,
    say: Callable[[str], None],
    only: set[str] | None = None,
) -> dict[str, Any]:
    strategies = [s for s in STRATEGIES if only is None or f"recall_{s}_e2e" in only]
    if not strategies:
        return {}
    p, k = profile, profile.concurrency
    say(f"N={n}: recall with the model in the loop: a service with HTM_EMBEDDING_PROVIDER=local")
    service = ServiceProcess(
        url,
        servers.redis_url,
        BENCH_DIR / "logs" / f"service-{n}-model.log",
        **{**profile.service, "embedding_provider": "local"},
    )
    redis = aioredis.from_url(servers.redis_url, decode_responses=True)
    per = _fresh_per_strategy(p)
    texts = dataset.distinct_questions(seed, CACHED_QUESTIONS + per * len(strategies))
    cached_texts = texts[:CACHED_QUESTIONS]
    qs = dataset.scale_questions(seed, p.questions)
    qvec_json = [vec_json(v) for v in qs.vectors]
    out: dict[str, Any] = {"cached_questions": CACHED_QUESTIONS}
    try:
        t0 = time.perf_counter()
        await service.start(limit_s=300)
        out["service_start_s"] = time.perf_counter() - t0
        out["embedding"] = service.readyz.get("embedding")
        meter = CpuMeter(service.pid, servers.postmaster_pid, redis)
        async with Http(service.base_url, k * 2) as client:
            for j, strategy in enumerate(strategies):
                fresh = [_body(strategy, t) for t in texts[CACHED_QUESTIONS + j * per :][:per]]
                cached = [_body(strategy, t) for t in cached_texts]
                client_vector = [
                    _body(strategy, t, v) for t, v in zip(qs.texts, qvec_json, strict=True)
                ]
                out[strategy] = await _measure(
                    client, meter, p, quiet, strategy, client_vector, cached, fresh
                )
                r = out[strategy]
                say(
                    f"  N={n:<7} recall_{strategy}_e2e p50 c=1: client vector "
                    f"{_ms(r['c1']['client_vector'])}, cached {_ms(r['c1']['cached'])}, fresh "
                    f"{_ms(r['c1']['fresh'])} ms; c={k}: {_ms(r['ck']['client_vector'])}, "
                    f"{_ms(r['ck']['cached'])}, {_ms(r['ck']['fresh'])} ms"
                )
    finally:
        service.stop()
        await redis.aclose()
    return out


def _ms(r: dict[str, Any]) -> str:
    x = r.get("p50_ms")
    return "-" if x is None else f"{x:.1f}"


async def _measure(
    client: Http,
    meter: CpuMeter,
    p: Profile,
    quiet: QuietBudget,
    strategy: str,
    client_vector: list[bytes],
    cached: list[bytes],
    fresh: list[bytes],
) -> dict[str, Any]:
    k = p.concurrency
    out: dict[str, Any] = {}
    budget = min(p.quiet_wait_s, max(0.0, p.quiet_budget_s - quiet.spent_s))
    out["quiet"] = await wait_for_quiet(budget)
    quiet.spent_s += out["quiet"]["waited_s"]

    # The cached questions, asked once (untimed) so that each is in the query cache.
    sem = asyncio.Semaphore(k)

    async def ask(body: bytes) -> None:
        async with sem:
            check_status(
                await client.post("/v1/robots/e2e-warm/recall", content=body, headers=JSON), 200
            )

    await asyncio.gather(*(ask(b) for b in cached))

    def calls(fresh_base: int) -> dict[str, Any]:
        async def cv(w: int, i: int) -> None:
            body = client_vector[i % len(client_vector)]
            r = await client.post(f"/v1/robots/e2e-{w}/recall", content=body, headers=JSON)
            check_status(r, 200)

        async def hit(w: int, i: int) -> None:
            body = cached[i % len(cached)]
            r = await client.post(f"/v1/robots/e2e-{w}/recall", content=body, headers=JSON)
            check_status(r, 200)

        async def new(w: int, i: int) -> None:
            # Each request index once per phase, and each phase its own slice: never repeated.
            body = fresh[fresh_base + i]
            r = await client.post(f"/v1/robots/e2e-{w}/recall", content=body, headers=JSON)
            check_status(r, 200)

        return {"client_vector": cv, "cached": hit, "fresh": new}

    before = await _cache_counts(client)
    c1_calls = calls(0)
    try:
        res = await interleaved([(w, c1_calls[w]) for w in WAYS], p.c1)
        out["c1"] = {w: r.to_json() for w, r in res.items()}
    except Exception as exc:
        log.exception("recall_%s_e2e at c=1 failed", strategy)
        out["c1"] = {w: {"error": f"{type(exc).__name__}: {exc}"[:300]} for w in WAYS}
    after = await _cache_counts(client)
    out["c1_cache"] = {x: after[x] - before[x] for x in ("hits", "misses")}

    ck_calls = calls(p.c1.warmup + p.c1.max_requests)
    out["ck"], out["ck_cache"] = {}, {}
    for w in WAYS:
        before = await _cache_counts(client)
        try:
            out["ck"][w] = (await closed_loop(ck_calls[w], k, p.ck, meter)).to_json()
        except Exception as exc:
            log.exception("recall_%s_e2e %s at c=%d failed", strategy, w, k)
            out["ck"][w] = {"error": f"{type(exc).__name__}: {exc}"[:300], "requests": 0}
        after = await _cache_counts(client)
        out["ck_cache"][w] = {x: after[x] - before[x] for x in ("hits", "misses")}
    return out
