"""One scale run: N memories in a fresh database, the service over HTTP against its floor.

Order: load (batch endpoint, client vectors) → VACUUM ANALYZE, autovacuum off → ANN vs exact →
read operations → write operations, so the reads see exactly N memories. Each operation is
measured sequentially (c=1: latency; service, floor and core interleaved request by request)
and with K concurrent clients (c=K: throughput), for the service and for its floor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import resource
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import numpy as np
import redis.asyncio as aioredis

from app.config import PROJECT_ROOT
from app.recall.query import SearchQuery
from app.recall.search import Search
from app.timeframes.parse import parse_timeframe
from app.tokens import Tokenizer
from app.working_memory.store import robot_keys
from bench import dataset
from bench.base import (
    BATCH,
    CONTEXT_ROBOT,
    JSON,
    PROMPT_BUDGET,
    PROMPT_PATH,
    PROMPT_SESSION,
    PROMPT_SESSION_MESSAGES,
    RECALL_LIMIT,
    SESSION,
    Profile,
    QuietBudget,
    check_status,
    prompt_body,
    vec_json,
    vec_list,
)
from bench.bulk import copy_floor, process_memory, relation_sizes, working_memory_bytes
from bench.driver import closed_loop, interleaved
from bench.floor import AddItem, Floor, RawSession, RecallSpec, explain
from bench.http import Http
from bench.infra import (
    BENCH_DIR,
    CpuMeter,
    Servers,
    ServiceProcess,
    admin,
    drop_database,
    floor_pool,
    fresh_database,
    kept_database,
    wait_for_quiet,
)

log = logging.getLogger("bench")

NAMESPACE = "default"
CONTEXT_ITEMS, CONTEXT_BUDGET = 1000, 1_000_000  # CONTEXT_ROBOT's (bench/base.py)
CONTEXT_MAX_TOKENS = 8000  # a prompt-sized context; `context_all` takes all 1,000 items
RARE_ROBOT, RARE_SHARE = "rare", 0.01
SCRIBES = 6
WEEK = "last week"
# recall_*_again_load: the questions a robot asks again (a warm-up places their hits)
AGAIN_QUESTIONS = 4


@dataclass
class Op:
    name: str
    service: Callable[[int, int], Awaitable[Any]]
    floor: Callable[[int, int], Awaitable[Any]] | None = None
    core: Callable[[int, int], Awaitable[Any]] | None = None
    explain: bool = False
    k_phase: bool = True
    note: str = ""
    prepare: Callable[[int, int], Any] | None = None  # builds each call's data, untimed
    # Writes: start every phase right after a checkpoint, so that each pays the same
    # full-page-image WAL for the HNSW pages it touches first.
    checkpoint: bool = False


@dataclass
class ScaleContext:
    profile: Profile
    n: int
    seed: int
    client: Http
    floor: Floor
    meter: CpuMeter
    robot_ids: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    quiet: QuietBudget = field(default_factory=QuietBudget)
    floor_pool: Any = None  # the floor's asyncpg pool, before the Floor exists
    service_env: dict[str, str] = field(default_factory=dict)  # for `htm import`
    # The first draw of fresh vectors for the writes (dataset.fresh_vectors): 0 on a fresh
    # load; on a kept database, past every draw an earlier run may have inserted.
    first_draw: int = 0


# --- loading ---------------------------------------------------------------------------------


def _authors(n: int, seed: int, session: int = SESSION) -> list[str]:
    """Author of each memory index (indices are in time order): `ctx` owns 1,000 (its working
    memory for context), `rare` about 1% (the scope=self filter), six scribes the rest. Robots
    write in sessions of `session` consecutive memories, and the sessions are shuffled
    (seeded), so every robot's memories are spread over the year."""
    ctx = min(CONTEXT_ITEMS, n // 2)
    rare = max(1, round(n * RARE_SHARE))
    rest = n - ctx - rare
    labels = [CONTEXT_ROBOT] * ctx + [RARE_ROBOT] * rare
    labels += [f"scribe-{(i // session) % SCRIBES}" for i in range(rest)]
    sessions = [labels[i : i + session] for i in range(0, n, session)]
    order = np.random.default_rng([seed, 10]).permutation(len(sessions))
    return [a for j in order for a in sessions[j]]


def _memory_json(key: str, m: dataset.ScaleMemories, i: int) -> str:
    return (
        f'{{"key":"{key}","content":{json.dumps(m.contents[i])},"type":"{m.types[i]}",'
        f'"importance":{float(m.importance[i])},"tags":{json.dumps(m.tags[i])},'
        f'"created_at":"{m.created_at[i].isoformat()}","embedding":{vec_json(m.vectors[i])}}}'
    )


LOAD_RETRIES = 5


async def load_memories(
    ctx: ScaleContext, max_seconds: float, tokenizer: Tokenizer | None = None
) -> dict[str, Any]:
    """N memories through POST /memories/batch, up to 500 per request, `profile.loaders`
    requests in flight. With `profile.copy_floor` = K (and a tokenizer for the token counts
    the floor stores), first a raw COPY of the first K memories into copies of the tables
    (bench/bulk.py), then the endpoint storing only (`working_memory: false`) over the same
    first K (then truncated away), then the load, whose rate over the first K is recorded."""
    t0 = time.perf_counter()
    mem = dataset.scale_memories(ctx.seed, ctx.n)
    gen_s = time.perf_counter() - t0
    authors = _authors(ctx.n, ctx.seed, ctx.profile.session)
    check_status(
        await ctx.client.put(
            f"/v1/robots/{CONTEXT_ROBOT}", json={"working_memory_budget": CONTEXT_BUDGET}
        ),
        200,
    )
    batches: list[tuple[str, list[int]]] = []
    start = 0
    while start < ctx.n:
        robot = authors[start]
        end = start
        while end < ctx.n and end - start < BATCH and authors[end] == robot:
            end += 1
        batches.append((robot, list(range(start, end))))
        start = end
    ctx.keys = [f"k{i:07d}" for i in range(ctx.n)]
    out: dict[str, Any] = {"memories": ctx.n, "batches": len(batches), "generate_s": gen_s}
    k = min(ctx.profile.copy_floor, ctx.n)
    if k and tokenizer is not None:
        async with ctx.floor_pool.acquire() as conn:  # type: ignore[union-attr]
            ns_id = await conn.fetchval("SELECT id FROM namespace WHERE name = $1", NAMESPACE)
        tokens = tokenizer.count_many(mem.contents[: k + BATCH])
        out["copy_floor"] = await copy_floor(
            ctx.floor_pool, mem, batches, ctx.keys, tokens, ns_id, k, ctx.profile.loaders,
            vec_json, ctx.meter,
        )  # fmt: skip
        k = out["copy_floor"]["memories"]  # whole batches
    deadline = time.perf_counter() + max_seconds
    if k and tokenizer is not None:
        # The endpoint storing only (`working_memory: false`) over the same first K, then
        # those rows are truncated away and the real load starts on empty tables again.
        first = [b for b in batches if b[1][0] < k]
        out["store_only"] = await _post_batches(ctx, mem, first, deadline, k, store_only=True)
        async with ctx.floor_pool.acquire() as conn:  # type: ignore[union-attr]
            await conn.execute(_FORGET_FIRST_K)
            await conn.execute("CHECKPOINT")
        # `htm import` of a file holding the same first K, then away again.
        out["htm_import"] = await _htm_import(ctx, mem, first)
        async with ctx.floor_pool.acquire() as conn:  # type: ignore[union-attr]
            await conn.execute(_FORGET_FIRST_K)
            await conn.execute("CHECKPOINT")
    loaded = await _post_batches(ctx, mem, batches, deadline, k, store_only=False)
    out.update(loaded, memories_per_s=ctx.n / loaded["load_s"], loaders=ctx.profile.loaders)
    if "copy_floor" in out and "first_k" in out:
        for variant in ("memory", "memory_key_event"):
            floor = out["copy_floor"][variant]["memories_per_s"]
            out["copy_floor"][variant]["endpoint_share"] = out["first_k"]["memories_per_s"] / floor
            if "store_only" in out:
                out["copy_floor"][variant]["store_only_share"] = (
                    out["store_only"]["first_k"]["memories_per_s"] / floor
                )
            if "htm_import" in out:
                out["copy_floor"][variant]["import_share"] = (
                    out["htm_import"]["memories_per_s"] / floor
                )
    return out


async def _htm_import(
    ctx: ScaleContext, mem: dataset.ScaleMemories, batches: list[tuple[str, list[int]]]
) -> dict[str, Any]:
    """`htm import` (a child process, configured as the service is) of an export file holding
    the memories of `batches`, with their client vectors: the rate over the whole command
    (its check pass over the file included) and CPU per memory: the command / PostgreSQL /
    Redis (the service idles meanwhile)."""
    path = BENCH_DIR / "import-first-k.jsonl"
    header = {"format": "htm-export", "version": 1, "namespace": NAMESPACE, "model": None,
              "dimension": int(mem.vectors.shape[1]), "embeddings": True,
              "exported_at": datetime.now(UTC).isoformat()}  # fmt: skip
    with path.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for robot, idx in batches:
            for i in idx:
                line = _memory_json(ctx.keys[i], mem, i)[:-1]
                f.write(f'{line},"author":"{robot}","embedding_model":"client"}}\n')
    n = sum(len(idx) for _, idx in batches)
    args = [sys.executable, "-m", "app.cli", "import", str(path), "--namespace", NAMESPACE]
    cpu_before = await ctx.meter.sample()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *args, "--quiet", cwd=PROJECT_ROOT, env=ctx.service_env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await proc.communicate()
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"htm import failed: {stderr.decode()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ctx.meter.per_request(cpu_before, await ctx.meter.sample(), n, seconds)
    own = (after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) * 1000 / n
    path.unlink()
    return {
        "memories": n,
        "seconds": seconds,
        "memories_per_s": n / seconds,
        "summary": stdout.decode().strip(),
        "cpu_ms_per_memory": {**cpu, "import": own},
    }


# After the store-only pass: the tables it wrote, emptied (HNSW and GIN included), and the
# counters rebuilt from them. It placed nothing, so Redis and the mirror hold nothing of it.
# Every table holding rows of memories is named (TRUNCATE refuses a table another one's
# foreign key references unless both are named: memory_access, migration 0025).
_FORGET_FIRST_K = """
    TRUNCATE memory, memory_key, memory_event, memory_version, memory_alias, memory_access,
             memory_tag, memory_link;
    SELECT memory_count_rebuild()"""


async def _post_batches(
    ctx: ScaleContext,
    mem: dataset.ScaleMemories,
    batches: list[tuple[str, list[int]]],
    deadline: float,
    k: int,
    store_only: bool,
) -> dict[str, Any]:
    """POST the batches, `profile.loaders` in flight; the rate and CPU over the first k
    memories (`first_k`) and over all of them."""
    out: dict[str, Any] = {}
    queue = list(reversed(batches))
    total = sum(len(idx) for _, idx in batches)
    tail = ',"working_memory":false}' if store_only else "}"
    cpu_before = await ctx.meter.sample()
    t_load = time.perf_counter()
    done = 0

    async def loader() -> None:
        nonlocal done
        while queue:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"loading {ctx.n} memories took too long")
            robot, idx = queue.pop()
            body = '{"memories":[' + ",".join(_memory_json(ctx.keys[i], mem, i) for i in idx)
            body += "]" + tail
            for attempt in range(LOAD_RETRIES + 1):
                r = await ctx.client.post(
                    f"/v1/robots/{robot}/memories/batch", content=body.encode(), headers=JSON
                )
                # A 503 wrote nothing (e.g. a 500-memory INSERT past HTM_STATEMENT_TIMEOUT_MS
                # near 1,000,000 memories on 2 cores): a client retries it, and so does this.
                if r.status_code != 503 or attempt == LOAD_RETRIES:
                    break
                out["retried_503"] = out.get("retried_503", 0) + 1
                await asyncio.sleep(1.0 + attempt)
            check_status(r, 201)
            done += len(idx)
            if k and done >= k and "first_k" not in out:
                s = time.perf_counter() - t_load
                out["first_k"] = {"memories": done, "seconds": s, "memories_per_s": done / s}
                out["first_k"]["cpu_ms_per_memory"] = ctx.meter.per_request(
                    cpu_before, await ctx.meter.sample(), done, s
                )

    await asyncio.gather(*(loader() for _ in range(ctx.profile.loaders)))
    load_s = time.perf_counter() - t_load
    out["load_s"] = load_s
    out["cpu_ms_per_memory"] = ctx.meter.per_request(
        cpu_before, await ctx.meter.sample(), total, load_s
    )
    return out


async def make_private(pool: Any, pct: int) -> dict[str, int]:
    """PCT % of the memories (by id) private to their authors, the rest namespace-wide: the
    reading robots (`reader-*`) author none, so they read the rest alone. Counted after."""
    async with pool.acquire() as conn:
        # Every changed row is a new tuple in every index (the HNSW graph too): minutes.
        await conn.execute(
            """UPDATE memory m SET visibility = v.want
               FROM (SELECT id, CASE WHEN id % 100 < $1 THEN 'private' ELSE 'namespace' END
                            AS want FROM memory) v
               WHERE m.id = v.id AND m.visibility <> v.want""",
            pct,
            timeout=3600,
        )
        await conn.execute("VACUUM ANALYZE memory", timeout=3600)
        rows = await conn.fetch("SELECT visibility, count(*) AS n FROM memory GROUP BY 1")
    return {r["visibility"]: r["n"] for r in rows}


async def db_facts(pool: Any) -> dict[str, Any]:
    """Sizes and the settings that matter for these numbers."""
    async with pool.acquire() as conn:
        sizes = await conn.fetch(
            """SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_class c
               WHERE c.relname IN ('memory', 'memory_embedding_hnsw', 'memory_search_tsv',
                                   'memory_content_tsv',
                                   'memory_event', 'working_memory_item')"""
        )
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("shared_buffers", "work_mem", "effective_cache_size", "max_connections")
        }
        storage = await conn.fetchval(
            """SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
               WHERE a.attrelid = 'memory'::regclass AND a.attname = 'embedding'"""
        )
    return {
        "bytes": {r["relname"]: r["bytes"] for r in sizes},
        "settings": settings,
        "vector_storage": storage,
    }


# --- ANN vs exact ----------------------------------------------------------------------------

_EXACT_SQL = """
    SELECT m.id FROM memory m
    WHERE m.namespace_id = $1 AND m.deleted_at IS NULL AND m.embedding_status = 'ready'
      AND m.embedding IS NOT NULL
    ORDER BY (m.embedding <=> $2) + 0, m.id
    LIMIT $3"""

_ANN_SQL = """
    SELECT m.id FROM memory m
    WHERE m.namespace_id = $1 AND m.deleted_at IS NULL AND m.embedding_status = 'ready'
      AND m.embedding IS NOT NULL
    ORDER BY m.embedding <=> $2
    LIMIT $3"""


async def ann_agreement(ctx: ScaleContext, k: int = 10) -> dict[str, Any]:
    """recall@k of the service's HNSW search against exact cosine kNN (a `+ 0` ORDER BY the
    index cannot serve), and the same for a few hnsw.ef_search values."""
    # Questions the timed phases do not ask, drawn over the memories' own latent space. (Until
    # 2026-11-21 this used `seed + 1`, i.e. another latent space: query vectors unrelated to
    # every memory, the out-of-distribution worst case for a graph index, and 0.72 at 100k.)
    q = dataset.scale_questions(ctx.seed, ctx.profile.ann_queries, draw=1)
    floor = ctx.floor
    exact: list[set[int]] = []
    service: list[set[int]] = []
    sweep = {40: [], 80: [], 100: [], 200: []}  # type: dict[int, list[set[int]]]
    t0 = time.perf_counter()
    async with floor.pool.acquire() as conn:
        plan_ann = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) {_ANN_SQL}", floor.ns_id, q.vectors[0], k
        )
        plan_exact = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) {_EXACT_SQL}", floor.ns_id, q.vectors[0], k
        )
        for v in q.vectors:
            exact.append({r["id"] for r in await conn.fetch(_EXACT_SQL, floor.ns_id, v, k)})
            async with conn.transaction():
                hits = await Search(RawSession(conn)).vector(  # type: ignore[arg-type]
                    SearchQuery(floor.ns_id, k, vector=[float(x) for x in v])
                )
            service.append({h.id for h in hits})
            for ef, found in sweep.items():
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                    found.append({r["id"] for r in await conn.fetch(_ANN_SQL, floor.ns_id, v, k)})

    def agreement(found: list[set[int]]) -> float:
        return float(np.mean([len(a & e) / k for a, e in zip(found, exact, strict=True)]))

    def top_node(plan: Any) -> str:
        doc = json.loads(plan) if isinstance(plan, str) else plan
        nodes: list[str] = []
        node = doc[0]["Plan"]
        while node:
            index = node.get("Index Name")
            nodes.append(node["Node Type"] + (f" using {index}" if index else ""))
            node = (node.get("Plans") or [None])[0]
        return " > ".join(nodes)

    return {
        "k": k,
        "queries": len(q.vectors),
        "service": agreement(service),
        "by_ef_search": {str(ef): agreement(found) for ef, found in sweep.items()},
        "plan_ann": top_node(plan_ann),
        "plan_exact": top_node(plan_exact),
        "seconds": time.perf_counter() - t0,
    }


# --- the operations --------------------------------------------------------------------------


async def seed_prompt_session(ctx: ScaleContext) -> None:
    """The 50-message session the prompt operation reads (alternating user and assistant),
    seeded once: a database kept for --reuse has it already, and seeding again would grow
    the session the prompt reads run after run."""
    path = f"/v1/robots/{CONTEXT_ROBOT}/sessions/{PROMPT_SESSION}/messages"
    held = await ctx.client.get(f"{path}?n=1")
    if held.status_code == 200 and held.json()["total_messages"] >= PROMPT_SESSION_MESSAGES:
        return
    messages = [
        {"role": "user" if j % 2 == 0 else "assistant",
         "content": f"Message {j} of the conversation about the staging database and deploys."}
        for j in range(PROMPT_SESSION_MESSAGES)
    ]  # fmt: skip
    check_status(await ctx.client.post(path, json={"messages": messages}), 201)


def build_ops(ctx: ScaleContext, tokenizer: Tokenizer) -> tuple[list[Op], list[Op]]:
    """(read operations, write operations), each with its service call and floors."""
    c, floor, p = ctx.client, ctx.floor, ctx.profile
    qs = dataset.scale_questions(ctx.seed, p.questions)
    qvec_json = [vec_json(v) for v in qs.vectors]
    qvec = [vec_list(v) for v in qs.vectors]
    weeks = [parse_timeframe(WEEK, now) for now in qs.now]
    rare_id = ctx.robot_ids[RARE_ROBOT]
    rng = np.random.default_rng([ctx.seed, 9])
    key_order = [ctx.keys[i] for i in rng.integers(0, len(ctx.keys), size=4096)]

    def recall_body(i: int, strategy: str, variant: str, load: bool) -> bytes:
        body = {
            "query": qs.texts[i],
            "strategy": strategy,
            "limit": RECALL_LIMIT,
            "load_into_working_memory": load,
        }
        if variant == "self":
            body["scope"] = "self"
        if variant == "week":
            body["timeframe"] = WEEK
            body["now"] = qs.now[i].isoformat()
        raw = json.dumps(body)
        if strategy != "fulltext":  # agents send no vector for a pure keyword search
            raw = raw[:-1] + f',"embedding":{qvec_json[i]}}}'
        return raw.encode()

    def recall_spec(i: int, strategy: str, variant: str, load: bool) -> RecallSpec:
        week = weeks[i] if variant == "week" else None
        return RecallSpec(
            strategy=strategy,
            query=qs.texts[i],
            vector=qvec[i],
            self_scope=variant == "self",
            start=week.start if week else None,
            end=week.end if week else None,
            limit=RECALL_LIMIT,
            load=load,
        )

    def recall_op(strategy: str, variant: str, load: bool = False, note: str = "") -> Op:
        # `again`: an unfiltered recall whose question the robot asked a moment ago (one of
        # AGAIN_QUESTIONS, in turn; the warm-up asks each), so its hits are in working memory.
        nq = AGAIN_QUESTIONS if variant == "again" else len(qs.texts)
        bodies = [recall_body(i, strategy, variant, load) for i in range(nq)]
        specs = [recall_spec(i, strategy, variant, load) for i in range(nq)]

        def robot(w: int) -> str:
            if variant == "self":
                return RARE_ROBOT  # scope=self: every client is the 1% robot
            if variant == "again" and load:
                return f"again-{strategy}-{w}"
            return f"loader-{strategy}-{w}" if load else f"reader-{w}"

        async def service(w: int, i: int) -> None:
            r = await c.post(f"/v1/robots/{robot(w)}/recall", content=bodies[i % nq], headers=JSON)
            check_status(r, 200)

        async def floor_call(w: int, i: int) -> None:
            await floor.recall(("f" if load else "") + robot(w), specs[i % nq])

        async def core(w: int, i: int) -> None:
            await floor.core_search(specs[i % nq], rare_id if variant == "self" else None)

        name = f"recall_{strategy}_{variant}" + ("_load" if load else "")
        return Op(name, service, floor_call, core, explain=not load, note=note)

    def context_op(strategy: str, max_tokens: int | None, name: str) -> Op:
        q = f"?strategy={strategy}" + (f"&max_tokens={max_tokens}" if max_tokens else "")

        async def service(w: int, i: int) -> None:
            check_status(await c.get(f"/v1/robots/{CONTEXT_ROBOT}/context{q}"), 200)

        async def floor_call(w: int, i: int) -> None:
            await floor.context(CONTEXT_ROBOT, strategy, max_tokens)

        async def core(w: int, i: int) -> None:
            await floor.core_context(CONTEXT_ROBOT, strategy, max_tokens or CONTEXT_BUDGET)

        return Op(name, service, floor_call, core)

    async def healthz(w: int, i: int) -> None:
        check_status(await c.get("/healthz"), 200)

    async def retrieve(w: int, i: int) -> None:
        key = key_order[i % len(key_order)]
        check_status(await c.get(f"/v1/robots/reader-{w}/memories/{key}"), 200)

    async def retrieve_floor(w: int, i: int) -> None:
        await floor.retrieve(f"reader-{w}", key_order[i % len(key_order)])

    async def retrieve_core(w: int, i: int) -> None:
        await floor.core_get(key_order[i % len(key_order)])

    async def stats_robot(w: int, i: int) -> None:
        check_status(await c.get(f"/v1/robots/{RARE_ROBOT}/stats"), 200)

    async def stats_robot_floor(w: int, i: int) -> None:
        await floor.robot_stats(RARE_ROBOT)

    async def stats_ns(w: int, i: int) -> None:
        check_status(await c.get("/v1/stats"), 200)

    async def stats_ns_floor(w: int, i: int) -> None:
        await floor.namespace_stats()

    reads = [Op("healthz", healthz, note="HTTP stack only: client + uvicorn + FastAPI")]
    for strategy in ("vector", "fulltext", "hybrid"):
        for variant in ("all", "self", "week"):
            reads.append(recall_op(strategy, variant))
    for strategy in ("vector", "hybrid"):  # beside recall_<strategy>_again_load (the writes)
        reads.append(recall_op(strategy, "again", note="one of 4 questions, asked again"))
    for strategy in ("recent", "important", "balanced"):
        reads.append(context_op(strategy, CONTEXT_MAX_TOKENS, f"context_{strategy}"))
    reads.append(context_op("balanced", None, "context_all"))
    reads.append(Op("retrieve", retrieve, retrieve_floor, retrieve_core, explain=True))
    reads.append(Op("stats_robot", stats_robot, stats_robot_floor, explain=True))
    reads.append(Op("stats_namespace", stats_ns, stats_ns_floor, explain=True))

    # Prompt assembly for the robot with 1,000 working-memory items and a 50-message session
    # (seeded by seed_prompt_session before the reads): the session window, working memory's
    # outline and the contents taken, a hybrid recall of 10 (full text alone without an
    # embedder) and the exact token fitting, in one call. Floor: Floor.prompt, the same
    # statements and scripts with the outline read beside the SQL, as the service does.
    async def prompt(w: int, i: int) -> None:
        body = prompt_body(qs.texts[i % len(qs.texts)])
        check_status(await c.post(PROMPT_PATH, json=body), 200)

    async def prompt_floor(w: int, i: int) -> None:
        spec = RecallSpec("hybrid", qs.texts[i % len(qs.texts)], None, False, None, None, 10, False)
        await floor.prompt(CONTEXT_ROBOT, spec, PROMPT_SESSION, PROMPT_BUDGET)

    reads.append(Op("prompt", prompt, prompt_floor, note="session + working memory + recall"))

    # --- writes: every request inserts vectors never inserted before (see fresh_vectors) ---
    pool = dataset.scale_memories(ctx.seed, 1000, offset=11)
    draws = itertools.count(ctx.first_draw)
    # Contents new to a kept database too (--reuse): the default dedupe would make a repeat of
    # an earlier run's add a 200 reinforcement.
    run = uuid.uuid4().hex[:8]
    # The core INSERT's author: a scribe, so that the scope=self set (the rare robot's 1 %)
    # stays what it was loaded as when a kept database is measured again (--reuse).
    writer_id = ctx.robot_ids["scribe-0"]

    def add_json(it: AddItem, vector_json: str) -> str:
        return (
            f'{{"content":{json.dumps(it.content)},"type":"{it.type}",'
            f'"importance":{it.importance},"tags":{json.dumps(list(it.tags))},'
            f'"embedding":{vector_json}}}'
        )

    def fresh(count: int, batch: bool) -> tuple[list[AddItem], bytes]:
        """`count` new memories (contents from a pool, fresh vectors) and their JSON body."""
        draw = next(draws)
        rows = (np.arange(count) + draw * count) % len(pool.contents)
        # Every add is new content: the deployment's default dedupe (`exact`) would make a
        # repeat a reinforcement of the stored memory (200), not an add.
        vectors = [vec_json(v) for v in dataset.fresh_vectors(ctx.seed, count, draw)]
        contents = [f"{pool.contents[j]} [{run} {draw}]" for j in rows.tolist()]
        items = [
            AddItem(
                content,
                tokens,
                json.loads(v),  # the numbers the service parses from the body
                pool.types[j],
                float(pool.importance[j]),
                tuple(pool.tags[j]),
            )
            for j, content, tokens, v in zip(
                rows.tolist(), contents, tokenizer.count_many(contents), vectors, strict=True
            )
        ]
        parts = [add_json(it, v) for it, v in zip(items, vectors, strict=True)]
        body = '{"memories":[' + ",".join(parts) + "]}" if batch else parts[0]
        return items, body.encode()

    def one(w: int, i: int) -> tuple[list[AddItem], bytes]:
        return fresh(1, batch=False)

    def hundred(w: int, i: int) -> tuple[list[AddItem], bytes]:
        return fresh(100, batch=True)

    async def add(w: int, prepared: tuple[list[AddItem], bytes]) -> None:
        path = f"/v1/robots/writer-{w}/memories"
        check_status(await c.post(path, content=prepared[1], headers=JSON), 201)

    def one_deduplicated(w: int, i: int) -> tuple[list[AddItem], bytes]:
        # Contents repeat in the pool: a unique suffix makes each add new, as most are, so
        # this measures the duplicate check (exact, then the nearest of the type) and a store.
        items, _ = fresh(1, batch=False)
        it = dataclasses.replace(items[0], content=f"{items[0].content} [{uuid.uuid4().hex[:8]}]")
        vector = json.dumps(it.vector)
        return [it], (add_json(it, vector)[:-1] + ',"dedupe":"semantic"}').encode()

    async def add_dedupe(w: int, prepared: tuple[list[AddItem], bytes]) -> None:
        # A fresh vector can still be within 0.92 of a stored one: then it is a duplicate (200).
        path = f"/v1/robots/writer-{w}/memories"
        r = await c.post(path, content=prepared[1], headers=JSON)
        check_status(r, 200 if r.status_code == 200 else 201)

    async def add_batch(w: int, prepared: tuple[list[AddItem], bytes]) -> None:
        path = f"/v1/robots/writer-{w}/memories/batch"
        check_status(await c.post(path, content=prepared[1], headers=JSON), 201)

    async def add_floor(w: int, prepared: tuple[list[AddItem], bytes]) -> None:
        await floor.add(f"fwriter-{w}", prepared[0])

    async def add_core(w: int, prepared: tuple[list[AddItem], bytes]) -> None:
        await floor.core_insert(writer_id, prepared[0])

    async def session_append(w: int, i: int) -> None:
        body = {"messages": [{"role": "user", "content": pool.contents[i % len(pool.contents)]}]}
        path = f"/v1/robots/writer-{w}/sessions/bench-{w}/messages"
        check_status(await c.post(path, json=body), 201)

    # Recall loading its 10 hits into working memory, beside the same recall without
    # (recall_<strategy>_all above): `all_load` asks the robot questions it has not asked
    # (at c=1 nearly every request; the protocol's placement), `again_load` one it asked a
    # moment ago (its hits in place: a refresh). The floor places them all (bench/floor.py).
    load_note = "loads the hits: lock, place script, mirror record"
    again_note = "hits in place already: refresh script + one mirror statement"
    writes = [
        recall_op("hybrid", "all", load=True, note=load_note),
        recall_op("hybrid", "again", load=True, note=again_note),
        recall_op("vector", "all", load=True, note=load_note),
        recall_op("vector", "again", load=True, note=again_note),
        Op("session_append", session_append, note="one message, durable first; no floor"),
        Op("add", add, add_floor, add_core, prepare=one, checkpoint=True),
        Op(
            "add_dedupe_semantic",
            add_dedupe,
            add_floor,
            add_core,
            prepare=one_deduplicated,
            checkpoint=True,
            note="dedupe: semantic (advisory locks, nearest of the type; no group commit)",
        ),
        Op("add_batch100", add_batch, add_floor, add_core, prepare=hundred, checkpoint=True),
    ]
    return reads, writes


_TABLES = ("memory", "memory_key", "memory_event", "working_memory_item", "robot")

_AUTOVACUUM_SQL = """
    SELECT (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables)
           AS done,
           (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker')
           AS running"""


async def _autovacuum(ctx: ScaleContext) -> tuple[int, int]:
    async with ctx.floor.pool.acquire() as conn:
        row = await conn.fetchrow(_AUTOVACUUM_SQL)
    return int(row["done"]), int(row["running"])


async def _checkpoint(ctx: ScaleContext) -> None:
    try:
        async with ctx.floor.pool.acquire() as conn:
            await conn.execute("CHECKPOINT")
    except asyncpg.PostgresError:  # not allowed to (a server of your own)
        pass


async def measure(ctx: ScaleContext, op: Op) -> dict[str, Any]:
    p, k = ctx.profile, ctx.profile.concurrency
    out: dict[str, Any] = {"note": op.note} if op.note else {}
    budget = min(p.quiet_wait_s, max(0.0, p.quiet_budget_s - ctx.quiet.spent_s))
    out["quiet"] = await wait_for_quiet(budget)
    ctx.quiet.spent_s += out["quiet"]["waited_s"]
    # Autovacuum on a table with an HNSW index is expensive; say when it ran during a phase.
    done_before, running_before = await _autovacuum(ctx)

    async def run(call: Any, c: int) -> dict[str, Any]:
        limits = p.c1 if c == 1 else p.ck
        if op.checkpoint:
            await _checkpoint(ctx)
        try:
            return (await closed_loop(call, c, limits, ctx.meter, op.prepare)).to_json()
        except Exception as exc:  # e.g. a floor out of step with a changed service
            log.exception("%s at c=%d failed", op.name, c)
            return {"error": f"{type(exc).__name__}: {exc}"[:300], "requests": 0}

    if op.floor is None:
        out["service"] = await run(op.service, 1)
    else:  # c=1: service, floor and core request by request, in rotating order
        ways = [("service", op.service), ("floor", op.floor)]
        if op.core:
            ways.append(("core", op.core))
        if op.checkpoint:
            await _checkpoint(ctx)
        try:
            for name, r in (await interleaved(ways, p.c1, op.prepare)).items():
                out[name] = r.to_json()
        except Exception as exc:
            log.exception("%s at c=1 failed", op.name)
            for name, _ in ways:
                out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300], "requests": 0}
    if op.k_phase:
        out["service_k"] = await run(op.service, k)
        if op.floor:
            out["floor_k"] = await run(op.floor, k)
    done_after, running_after = await _autovacuum(ctx)
    out["autovacuum"] = {
        "finished": done_after - done_before,
        "running": max(running_before, running_after),
    }
    return out


def _progress(n: int, name: str, r: dict[str, Any]) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    s, f = r["service"], r.get("floor", {})
    line = f"  N={n:<7} {name:<26} p50 {ms(s.get('p50_ms'))} ms"
    if f.get("p50_ms") and s.get("p50_ms"):
        line += f" | floor {ms(f['p50_ms'])} (x{s['p50_ms'] / f['p50_ms']:.1f})"
    if r.get("service_k", {}).get("throughput") is not None:
        line += f" | @K {r['service_k']['throughput']:.0f}/s"
        if r.get("floor_k", {}).get("throughput") is not None:
            line += f" vs floor {r['floor_k']['throughput']:.0f}/s"
    failed = [r[k]["error"] for k in ("service", "floor", "core", "service_k", "floor_k")
              if r.get(k, {}).get("error")]  # fmt: skip
    if failed:
        line += f" | FAILED: {failed[0]}"
    errors = sum(r[k].get("errors", 0) for k in ("service", "floor", "core", "service_k") if k in r)
    if errors:
        line += f" | {errors} ERRORS"
    return line


async def _measure_op(
    ctx: ScaleContext,
    op: Op,
    only: set[str] | None,
    result: dict[str, Any],
    say: Callable[[str], None],
) -> None:
    if only is not None and op.name not in only:
        return
    r = await measure(ctx, op)
    result["ops"][op.name] = r
    say(_progress(ctx.n, op.name, r))
    if op.explain and op.floor is not None:
        fl = op.floor
        result["plans"][op.name] = await explain(ctx.floor, lambda fl=fl: fl(0, 0))


async def run_scale(
    servers: Servers,
    profile: Profile,
    n: int,
    seed: int,
    keep: bool,
    quiet: QuietBudget,
    say: Callable[[str], None],
    only: set[str] | None = None,
    reuse: bool = False,
    loaded: dict[str, Any] | None = None,
    model: bool = False,
    private_share: int | None = None,
) -> dict[str, Any]:
    db = f"htm_bench_{n}"
    url = await kept_database(servers, db, n) if reuse else None
    if url is None:
        say(f"N={n}: fresh database {db}, migrate")
        url = await fresh_database(servers, db)
    else:
        say(f"N={n}: reusing the kept database {db} (migrated, not reloaded)")
    redis = aioredis.from_url(servers.redis_url, decode_responses=True)
    await redis.flushdb()
    service = ServiceProcess(
        url,
        servers.redis_url,
        BENCH_DIR / "logs" / f"service-{n}.log",
        **{"embedding_provider": "none", **profile.service},
    )
    pool = None
    floor: Floor | None = None
    result: dict[str, Any] = {"n": n}
    try:
        await service.start()
        result["readyz"] = service.readyz
        async with Http(service.base_url, profile.concurrency * 2) as client:
            result["client"] = client.name
            pool = await floor_pool(url, profile.concurrency)
            tokenizer = Tokenizer.load("cl100k_base")
            if not tokenizer.ready:
                raise RuntimeError(tokenizer.error)
            meter = CpuMeter(service.pid, servers.postmaster_pid, redis)
            # The floor needs the namespace id, known once the service created it.
            ctx = ScaleContext(profile, n, seed, client, None, meter, quiet=quiet)  # type: ignore[arg-type]
            ctx.floor_pool = pool
            ctx.service_env = service.env
            if profile.copy_floor and not reuse:
                say(f"N={n}: raw COPY floor of the first {min(n, profile.copy_floor)} memories")
            if reuse:
                # A kept database holds the load and whatever earlier runs' writes added;
                # Redis was flushed, so working memories are rebuilt from their mirrors.
                ctx.keys = [f"k{i:07d}" for i in range(n)]
                result["load"] = ld = {"reused": True, **(loaded or {})}
                # Earlier runs' writes drew their "fresh" vectors from draw 0 too: the same
                # vectors again would be duplicates of rows they stored (semantic dedupe finds
                # the core INSERT's rows, which claim no key), not fresh. Each memory stored
                # since the load takes the next runs one draw further.
                async with pool.acquire() as conn:
                    ctx.first_draw = int(await conn.fetchval("SELECT count(*) FROM memory")) - n
            else:
                say(f"N={n}: loading through POST /memories/batch")
                result["load"] = ld = await load_memories(ctx, max(600.0, n / 20), tokenizer)
                say(
                    f"N={n}: loaded in {ld['load_s']:.1f}s "
                    f"({ld['memories_per_s']:.0f} memories/s); VACUUM ANALYZE"
                )
            if private_share is not None:
                say(f"N={n}: {private_share} % of the memories private to their authors")
                result["private_share"] = await make_private(pool, private_share)
            if "copy_floor" in ld:
                cf = ld["copy_floor"]
                say(
                    f"N={n}: first {cf['memories']}: endpoint "
                    f"{ld['first_k']['memories_per_s']:.0f}/s, raw COPY memory "
                    f"{cf['memory']['memories_per_s']:.0f}/s "
                    f"({100 * cf['memory']['endpoint_share']:.0f} %), memory+key+event "
                    f"{cf['memory_key_event']['memories_per_s']:.0f}/s "
                    f"({100 * cf['memory_key_event']['endpoint_share']:.0f} %)"
                )
            # Fresh statistics, then no autovacuum while measuring: a vacuum of the HNSW index
            # set off by one phase's inserts would land on the next phase (service or floor)
            # and decide the comparison. Autovacuum's own cost is not what this measures.
            await admin(
                url,
                "VACUUM ANALYZE",
                *(f"ALTER TABLE {t} SET (autovacuum_enabled = false)" for t in _TABLES),
                "CHECKPOINT",
            )
            async with pool.acquire() as conn:
                ns_id = await conn.fetchval("SELECT id FROM namespace WHERE name = $1", NAMESPACE)
                rows = await conn.fetch("SELECT id, name FROM robot")
            ctx.robot_ids = {r["name"]: r["id"] for r in rows}
            ctx.floor = floor = Floor(
                pool, redis, NAMESPACE, ns_id, 128_000, dedupe=profile.service.get("dedupe")
            )
            result["db"] = await db_facts(pool)
            result["sizes"] = await relation_sizes(pool)
            result["ram_after_load"] = await process_memory(
                servers.postmaster_pid, service.pid, redis
            )
            result["working_memory_bytes"] = await working_memory_bytes(
                redis, list(robot_keys(NAMESPACE, CONTEXT_ROBOT))
            )
            say(f"N={n}: ANN vs exact agreement ({profile.ann_queries} queries)")
            async with asyncio.timeout(900):
                result["ann"] = await ann_agreement(ctx)
            say(
                f"N={n}: agreement@10 {result['ann']['service']:.3f} at the service's ef_search; "
                f"plan {result['ann']['plan_ann']}"
            )
            await seed_prompt_session(ctx)
            reads, writes = build_ops(ctx, tokenizer)
            result["ops"] = {}
            result["plans"] = {}
            for op in reads:
                await _measure_op(ctx, op, only, result, say)
            if model:
                # Before the writes, so that it searches the same N memories (bench/e2e.py).
                from bench.e2e import run_e2e

                e2e = await run_e2e(servers, profile, n, url, seed, quiet, say, only, floor)
                if e2e:
                    result["e2e"] = e2e
            for op in writes:
                await _measure_op(ctx, op, only, result, say)
            if only is None or "search_text" in only:
                # After every timed phase: it adds memories (bench/search_text.py).
                from bench.search_text import search_text_sizes

                st = await search_text_sizes(client, pool, seed, n)
                if st:
                    result["search_text"] = st
                    say(
                        f"N={n}: search text of {st['memories']} conversation memories: "
                        f"{st['conversation']['search_text_bytes']:.0f} bytes each; tsvector "
                        f"x{st['tsv_ratio']:.2f}, GIN x{st['gin_ratio']:.2f} against plain"
                    )
            result["ram_end"] = await process_memory(servers.postmaster_pid, service.pid, redis)
    finally:
        service.stop()
        if floor is not None:
            await floor.aclose()
        if pool is not None:
            await pool.close()
        await redis.aclose()
        if not keep:
            await drop_database(servers, db)
    return result
