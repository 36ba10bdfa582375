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
import itertools
import json
import logging
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from bench import dataset
from bench.base import (
    JSON,
    PROMPT_PATH,
    RECALL_LIMIT,
    Profile,
    QuietBudget,
    check_status,
    prompt_body,
    vec_json,
)
from bench.driver import closed_loop, interleaved
from bench.floor import Floor, RecallSpec
from bench.http import Http
from bench.infra import BENCH_DIR, CpuMeter, Servers, ServiceProcess, wait_for_quiet

log = logging.getLogger("bench")

STRATEGIES = ("vector", "hybrid")
OPS = (*(f"recall_{s}_e2e" for s in STRATEGIES), "add_e2e", "prompt_e2e")
WAYS = ("client_vector", "cached", "fresh", "fresh_load")
CACHED_QUESTIONS = 200
# The embedding floor: this many single-text calls to the model alone, after a warm-up.
FLOOR_TEXTS = 200


def _fresh_per_phase(p: Profile) -> int:
    """Fresh texts one way can use: every request of its c=1 and c=K phases."""
    return p.c1.warmup + p.c1.max_requests + p.ck.warmup + p.ck.max_requests


def _body(strategy: str, text: str, vector_json: str | None = None, load: bool = False) -> bytes:
    body = {
        "query": text,
        "strategy": strategy,
        "limit": RECALL_LIMIT,
        "load_into_working_memory": load,
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
    floor: Floor | None = None,
) -> dict[str, Any]:
    strategies = [s for s in STRATEGIES if only is None or f"recall_{s}_e2e" in only]
    extra = [op for op in ("add_e2e", "prompt_e2e") if only is None or op in only]
    if not strategies and not extra:
        return {}
    p, k = profile, profile.concurrency
    say(f"N={n}: the model in the loop: a service with HTM_EMBEDDING_PROVIDER=local")
    service = ServiceProcess(
        url,
        servers.redis_url,
        BENCH_DIR / "logs" / f"service-{n}-model.log",
        **{**profile.service, "embedding_provider": "local"},
    )
    redis = aioredis.from_url(servers.redis_url, decode_responses=True)
    per = _fresh_per_phase(p)
    # One seeded stream of distinct questions, cut into disjoint slices: the cached ones, the
    # embedding floor's, then per strategy its fresh and fresh-with-loading ones, then the
    # prompts' inputs. No text is ever asked twice outside the cached slice.
    need = CACHED_QUESTIONS + FLOOR_TEXTS + per * (2 * len(strategies) + 1)
    texts = dataset.distinct_questions(seed, need)
    cached_texts = texts[:CACHED_QUESTIONS]
    floor_texts = texts[CACHED_QUESTIONS : CACHED_QUESTIONS + FLOOR_TEXTS]
    rest = texts[CACHED_QUESTIONS + FLOOR_TEXTS :]
    qs = dataset.scale_questions(seed, p.questions)
    qvec_json = [vec_json(v) for v in qs.vectors]
    out: dict[str, Any] = {"cached_questions": CACHED_QUESTIONS}
    try:
        t0 = time.perf_counter()
        await service.start(limit_s=300)
        out["service_start_s"] = time.perf_counter() - t0
        out["embedding"] = service.readyz.get("embedding")
        memory_texts = [
            f"{t} [floor {i}]"
            for i, t in enumerate(dataset.scale_memories(seed, FLOOR_TEXTS, offset=29).contents)
        ]
        out["embedding_floor"], vectors = await embedding_floor(
            out["embedding"] or {}, floor_texts, memory_texts, k
        )
        f = out["embedding_floor"]
        say(
            f"  N={n:<7} embedding floor ({f['runtime']}, {f['threads']} thread(s)): a "
            f"question {f['c1']['p50_ms']:.1f} ms p50, a memory "
            f"{f['memories']['p50_ms']:.1f} ms; batches of {k}: {f['ck']['texts_per_s']:.0f}/s"
        )
        if floor is not None:
            out["sql_floor_model_vectors"] = await model_vector_floor(
                floor, strategies, floor_texts, vectors
            )
        meter = CpuMeter(service.pid, servers.postmaster_pid, redis)
        async with Http(service.base_url, k * 2) as client:
            for j, strategy in enumerate(strategies):
                mine = rest[2 * j * per : 2 * (j + 1) * per]
                fresh = [_body(strategy, t) for t in mine[:per]]
                fresh_load = [_body(strategy, t, load=True) for t in mine[per:]]
                cached = [_body(strategy, t) for t in cached_texts]
                client_vector = [
                    _body(strategy, t, v) for t, v in zip(qs.texts, qvec_json, strict=True)
                ]
                out[strategy] = await _measure(
                    client, meter, p, quiet, strategy, client_vector, cached, fresh, fresh_load
                )
                r = out[strategy]
                say(
                    f"  N={n:<7} recall_{strategy}_e2e p50 c=1: client vector "
                    f"{_ms(r['c1']['client_vector'])}, cached {_ms(r['c1']['cached'])}, fresh "
                    f"{_ms(r['c1']['fresh'])}, fresh loading {_ms(r['c1']['fresh_load'])} ms; "
                    f"c={k}: {_ms(r['ck']['client_vector'])}, {_ms(r['ck']['cached'])}, "
                    f"{_ms(r['ck']['fresh'])}, {_ms(r['ck']['fresh_load'])} ms"
                )
            inputs = rest[2 * len(strategies) * per :]
            if "add_e2e" in extra:
                out["add"] = await _adds(client, meter, p, quiet, seed)
                r = out["add"]
                say(
                    f"  N={n:<7} add_e2e p50 c=1: client vector {_ms(r['c1']['client_vector'])}"
                    f", text {_ms(r['c1']['text'])} ms; c={k}: "
                    f"{_tp(r['ck']['client_vector'])}, {_tp(r['ck']['text'])} req/s"
                )
            if "prompt_e2e" in extra:
                out["prompt"] = await _prompts(client, meter, p, quiet, inputs)
                r = out["prompt"]
                say(
                    f"  N={n:<7} prompt_e2e p50 c=1: {_ms(r['c1'])} ms; c={k}: {_tp(r['ck'])} req/s"
                )
    finally:
        service.stop()
        await redis.aclose()
    return out


async def embedding_floor(
    embedding: dict[str, Any], texts: list[str], memories: list[str], k: int
) -> tuple[dict[str, Any], list[list[float]]]:
    """The service's model alone, in this process: questions one after another (c=1), memory
    contents one after another (what an add embeds), and batches of k questions (what the
    micro-batcher sends at c=k). Built as the service built it (its /readyz names the
    runtime and the threads). Also returns the questions' vectors."""
    from app.config import Settings
    from app.embeddings.factory import build_local

    runtime = embedding.get("runtime", "torch")
    threads = int(embedding.get("threads") or 1)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        embedding_provider="local",
        # the int8 model names its vectors `<model>@int8v2`: the setting is the model's name
        embedding_model=embedding.get("model", "all-MiniLM-L6-v2").split("@")[0],
        embedding_dimension=int(embedding.get("dimension", 384)),
        embedding_runtime=runtime if runtime in ("onnx", "onnx-int8", "torch") else "auto",
        embedding_threads=threads,
        data_dir=BENCH_DIR / "service",
    )
    model = await build_local(settings)

    async def singles(pool: list[str]) -> tuple[list[float], list[list[float]]]:
        took, vectors = [], []
        for t in pool:
            t0 = time.perf_counter()
            vectors += await model.embed([t])
            took.append(time.perf_counter() - t0)
        return sorted(took), vectors

    try:
        await model.embed(texts[:8])
        single, vectors = await singles(texts)
        memory, _ = await singles(memories)
        batches = []
        for i in range(0, len(texts) - k + 1, k):
            t0 = time.perf_counter()
            await model.embed(texts[i : i + k])
            batches.append(time.perf_counter() - t0)
    finally:
        await model.aclose()
    batch_s = statistics.median(batches)

    def ms(xs: list[float]) -> dict[str, float]:
        return {
            "p50_ms": statistics.median(xs) * 1000,
            "p95_ms": xs[round(0.95 * (len(xs) - 1))] * 1000,
        }

    out = {
        "runtime": runtime,
        "threads": threads,
        "texts": len(texts),
        "c1": ms(single),
        "memories": ms(memory),
        "ck": {"batch": k, "batch_ms": batch_s * 1000, "texts_per_s": k / batch_s},
    }
    return out, vectors


async def model_vector_floor(
    floor: Floor, strategies: list[str], texts: list[str], vectors: list[list[float]]
) -> dict[str, Any]:
    """The raw-SQL floor of an unfiltered recall (bench/floor.py, as the scale table's) asked
    with the model's vectors of the embedding floor's questions: the search a fresh question
    makes, without the service. The scale table's floor searches with the bench's own vectors,
    which walk the HNSW graph and match the full text differently."""
    out: dict[str, Any] = {}
    for strategy in strategies:
        specs = [
            RecallSpec(strategy, t, v, False, None, None, RECALL_LIMIT, False)
            for t, v in zip(texts, vectors, strict=True)
        ]
        await floor.recall("e2e-floor", specs[0])
        took = []
        for spec in specs:
            t0 = time.perf_counter()
            await floor.recall("e2e-floor", spec)
            took.append(time.perf_counter() - t0)
        out[strategy] = {"p50_ms": statistics.median(took) * 1000, "requests": len(took)}
    return out


async def _adds(
    client: Http, meter: CpuMeter, p: Profile, quiet: QuietBudget, seed: int
) -> dict[str, Any]:
    """One memory per request: its text only (the service embeds it) or with a client vector.
    Every add is new content (a unique suffix), so none is a duplicate."""
    k = p.concurrency
    budget = min(p.quiet_wait_s, max(0.0, p.quiet_budget_s - quiet.spent_s))
    out: dict[str, Any] = {"quiet": await wait_for_quiet(budget)}
    quiet.spent_s += out["quiet"]["waited_s"]
    pool = dataset.scale_memories(seed, 1000, offset=23).contents
    vectors = dataset.fresh_vectors(seed, 1000, 77)
    counter = itertools.count()
    run = uuid.uuid4().hex[:8]  # a kept database (--reuse) holds an earlier run's adds

    def body(with_vector: bool) -> bytes:
        i = next(counter)
        content = f"{pool[i % len(pool)]} [e2e {run} {i}]"
        b = {"content": content, "type": "fact", "importance": 0.5}
        raw = json.dumps(b)
        if with_vector:
            raw = raw[:-1] + f',"embedding":{vec_json(vectors[i % len(vectors)])}}}'
        return raw.encode()

    def call(with_vector: bool) -> Callable[[int, int], Any]:
        async def add(w: int, i: int) -> None:
            path = f"/v1/robots/e2e-writer-{w}/memories"
            check_status(await client.post(path, content=body(with_vector), headers=JSON), 201)

        return add

    ways = {"client_vector": call(True), "text": call(False)}
    res = await interleaved(list(ways.items()), p.c1)
    out["c1"] = {w: r.to_json() for w, r in res.items()}
    out["ck"] = {w: (await closed_loop(c, k, p.ck, meter)).to_json() for w, c in ways.items()}
    return out


async def _prompts(
    client: Http, meter: CpuMeter, p: Profile, quiet: QuietBudget, inputs: list[str]
) -> dict[str, Any]:
    """The scale run's `prompt` (the robot with 1,000 working-memory items and a 50-message
    session, a hybrid recall of 10), each input a question never asked: the model embeds it."""
    k = p.concurrency
    budget = min(p.quiet_wait_s, max(0.0, p.quiet_budget_s - quiet.spent_s))
    out: dict[str, Any] = {"quiet": await wait_for_quiet(budget)}
    quiet.spent_s += out["quiet"]["waited_s"]

    def call(base: int) -> Callable[[int, int], Any]:
        async def prompt(w: int, i: int) -> None:
            body = prompt_body(inputs[base + i])
            check_status(await client.post(PROMPT_PATH, json=body), 200)

        return prompt

    res = await interleaved([("prompt", call(0))], p.c1)
    out["c1"] = res["prompt"].to_json()
    out["ck"] = (await closed_loop(call(p.c1.warmup + p.c1.max_requests), k, p.ck, meter)).to_json()
    return out


def _tp(r: dict[str, Any]) -> str:
    x = r.get("throughput")
    return "-" if x is None else f"{x:.1f}"


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
    fresh_load: list[bytes],
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

        async def new_load(w: int, i: int) -> None:
            body = fresh_load[fresh_base + i]
            r = await client.post(f"/v1/robots/e2e-{w}/recall", content=body, headers=JSON)
            check_status(r, 200)

        return {"client_vector": cv, "cached": hit, "fresh": new, "fresh_load": new_load}

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
