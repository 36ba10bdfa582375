"""`python -m bench.citus [--namespaces 16] [--per 400] [--seconds 8] [--rounds 2] [--out F]`:
the service on Citus (a coordinator and two workers, bench/citus_cluster.py) beside one plain
PostgreSQL on the same cores (issue 50, items 3-5). Needs Citus built into the embedded
server's binaries (docs/SCALING.md); without it, says so and exits 2.

1. **Load**: the same memories through the API into each database: N namespaces of `per`
   memories with random 384-dimension vectors (batches of 200, no working memory).
2. **Through the service**, alternated round after round (`htm serve`, client vectors, no
   embedding model): a vector recall and a hybrid recall at c=1 (10 hits, p50), and adds of
   one memory at c=8 (throughput), over the namespaces in turn. Ratios: Citus / plain.
3. **Bytes per memory**: the namespace-scoped tables' total size (on Citus
   `citus_total_relation_size`, every shard), over the memories.
4. **A worker lost under load** (Citus only): c=4 clients, each an add then a vector recall
   over its namespaces in turn (two on the namespaces of the worker to be stopped, two on
   the others), for --loss-seconds; the second worker is stopped (`immediate`) for the
   middle third. Answers by phase and by where the namespace lives;
   then, the worker back, every acknowledged add must be there.
5. **Rebalance** (Citus only): a third worker started, added (`citus_add_node`) and
   `citus_rebalance_start()` run under the same load; the time until
   `citus_rebalance_status()` says finished, the answers meanwhile, the shards per node
   after, and every acknowledged add there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from app.embedded import EmbeddedRedis
from bench import citus_cluster
from bench.driver import Limits, closed_loop
from bench.http import Http
from bench.infra import BENCH_DIR, ServiceProcess
from bench.replica import WORDS, vectors

SETTINGS = {"embedding_provider": "none", "dedupe": "off", "supersede": "off"}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pg(url: str) -> dict[str, Any]:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return {"host": u.host, "port": u.port, "user": u.username, "database": u.database}


async def load(base_url: str, namespaces: list[str], per: int, seed: int) -> float:
    """Every namespace's memories through the API (the same in every database: one seed)."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    async with Http(base_url, 4) as c:
        for ns in namespaces:
            vs = vectors(rng, per)
            for start in range(0, per, 200):
                batch = [
                    {
                        "key": f"m{i}",
                        "content": " ".join(rng.choice(WORDS, 12)),
                        "embedding": [float(x) for x in vs[i]],
                    }
                    for i in range(start, min(per, start + 200))
                ]
                r = await c.post(
                    "/v1/robots/loader/memories/batch",
                    json={"memories": batch, "working_memory": False},
                    headers={"X-Namespace": ns},
                )
                assert r.status_code == 201, r.text[:500]
    return time.perf_counter() - t0


async def service_phases(
    base_url: str, namespaces: list[str], queries: np.ndarray, seconds: float
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limits = Limits(max_requests=1_000_000, max_seconds=seconds, warmup=50)
    async with Http(base_url, 8) as c:
        for strategy in ("vector", "hybrid"):

            async def recall(w: int, i: int, strategy: str = strategy) -> None:
                r = await c.post(
                    f"/v1/robots/reader{w}/recall",
                    json={
                        "query": " ".join(WORDS[i % 7 : i % 7 + 3]),
                        "strategy": strategy,
                        "embedding": [float(x) for x in queries[i % len(queries)]],
                        "limit": 10,
                        "min_score": 0,
                    },
                    headers={"X-Namespace": namespaces[i % len(namespaces)]},
                )
                if r.status_code != 200 or len(r.json()["hits"]) != 10:
                    raise RuntimeError(f"{r.status_code}: {r.text[:200]}")

            out[f"recall_{strategy}_c1"] = (await closed_loop(recall, 1, limits)).to_json()
        run = uuid.uuid4().hex[:6]

        async def add(w: int, i: int) -> None:
            r = await c.post(
                f"/v1/robots/writer{w}/memories",
                json={
                    "key": f"add-{run}-{w}-{i}",
                    "content": " ".join(WORDS[i % 11 : i % 11 + 8]),
                    "embedding": [float(x) for x in queries[i % len(queries)]],
                },
                headers={"X-Namespace": namespaces[i % len(namespaces)]},
            )
            if r.status_code != 201:
                raise RuntimeError(f"{r.status_code}: {r.text[:200]}")

        out["add_c8"] = (await closed_loop(add, 8, limits)).to_json()

        async def add_unplaced(w: int, i: int) -> None:
            r = await c.post(
                f"/v1/robots/writer{w}/memories/batch",
                json={
                    "memories": [
                        {
                            "key": f"add-{run}-{w}-{i}-u",
                            "content": " ".join(WORDS[i % 11 : i % 11 + 8]),
                            "embedding": [float(x) for x in queries[i % len(queries)]],
                        }
                    ],
                    "working_memory": False,
                },
                headers={"X-Namespace": namespaces[i % len(namespaces)]},
            )
            if r.status_code != 201:
                raise RuntimeError(f"{r.status_code}: {r.text[:200]}")

        # the same without the working-memory placement (its robot row is a reference table's)
        out["add_unplaced_c8"] = (await closed_loop(add_unplaced, 8, limits)).to_json()
    return out


# The namespace-scoped tables (migration 0031 distributes them on Citus).
_SIZE_PLAIN = """
    SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
    WHERE c.relkind IN ('r', 'p') AND c.relnamespace = 'public'::regnamespace
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                  AND a.attname = 'namespace_id' AND NOT a.attisdropped)"""
_SIZE_CITUS = """
    SELECT sum(citus_total_relation_size(logicalrelid)) FROM pg_dist_partition
    WHERE partmethod = 'h'"""


async def bytes_per_memory(url: str, citus: bool) -> dict[str, Any]:
    conn = await asyncpg.connect(**_pg(url))
    try:
        await conn.execute("VACUUM ANALYZE")
        size = await conn.fetchval(_SIZE_CITUS if citus else _SIZE_PLAIN)
        n = await conn.fetchval("SELECT count(*) FROM memory")
    finally:
        await conn.close()
    return {"bytes": int(size), "memories": int(n), "per_memory": round(int(size) / int(n))}


async def worker_of(conn: asyncpg.Connection, namespaces: list[str]) -> dict[str, int]:
    rows = await conn.fetch(
        """SELECT s.name, n.nodeport FROM namespace s
           JOIN pg_dist_placement p
             ON p.shardid = get_shard_id_for_distribution_column('memory', s.id)
           JOIN pg_dist_node n ON n.groupid = p.groupid
           WHERE s.name = ANY($1::text[])""",
        namespaces,
    )
    return {r["name"]: r["nodeport"] for r in rows}


class Traffic:
    """Clients, each an add then a vector recall over its namespaces in turn, until
    stopped: every answer kept with its time, and the keys acknowledged."""

    def __init__(self, base_url: str, clients: list[list[str]], queries: np.ndarray) -> None:
        self.base_url = base_url
        self.clients = clients  # each client's namespaces, taken in turn
        namespaces = sorted({ns for c in clients for ns in c})
        self.queries = queries
        # (t, namespace, kind, status, seconds)
        self.answers: list[tuple[float, str, str, int, float]] = []
        self.acknowledged: dict[str, set[str]] = {ns: set() for ns in namespaces}
        self.refused: dict[str, set[str]] = {ns: set() for ns in namespaces}
        self.samples: dict[tuple[str, str, int], str] = {}  # a body of each failed answer
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.run = uuid.uuid4().hex[:6]

    async def _client(self, c: Http, w: int) -> None:
        i = 0
        while not self._stop.is_set():
            mine = self.clients[w]
            ns = mine[i % len(mine)]
            key = f"t-{self.run}-{w}-{i}"
            h = {"X-Namespace": ns}
            v = [float(x) for x in self.queries[i % len(self.queries)]]
            for kind in ("add", "recall"):
                t = time.monotonic()
                try:
                    if kind == "add":
                        r = await c.post(
                            "/v1/robots/traffic/memories",
                            json={"key": key, "content": "traffic " + key, "embedding": v},
                            headers=h,
                        )
                        (self.acknowledged if r.status_code == 201 else self.refused)[ns].add(key)
                    else:
                        r = await c.post(
                            "/v1/robots/traffic/recall",
                            json={"query": "traffic", "strategy": "vector", "embedding": v},
                            headers=h,
                        )
                    status = r.status_code
                    if status >= 300:
                        self.samples.setdefault((ns, kind, status), r.text[:300])
                except Exception:  # a client-side failure (a timeout) is an answer too
                    status = 0
                    if kind == "add":
                        self.refused[ns].add(key)
                self.answers.append((t, ns, kind, status, time.monotonic() - t))
            i += 1

    async def __aenter__(self) -> Traffic:
        n = len(self.clients)
        self._http = await Http(self.base_url, n, timeout_s=30).__aenter__()
        self._tasks = [asyncio.create_task(self._client(self._http, w)) for w in range(n)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self._http.__aexit__()

    def failures(self, where: dict[str, str]) -> dict[str, str]:
        """One answer's body for each place, kind and status that was not a success."""
        return {
            f"{where.get(ns, '?')} {kind} {status}": body
            for (ns, kind, status), body in sorted(self.samples.items())
        }

    def counts(self, since: float, until: float, where: dict[str, str]) -> dict[str, Any]:
        """Answers begun in [since, until) by the namespace's place (`where`), kind and
        status: how many, and their p50 in ms."""
        took: dict[str, list[float]] = {}
        for t, ns, kind, status, dt in self.answers:
            if since <= t < until:
                took.setdefault(f"{where.get(ns, '?')} {kind} {status}", []).append(dt)
        return {
            k: {"n": len(v), "p50_ms": round(float(np.median(v)) * 1000, 1)}
            for k, v in sorted(took.items())
        }

    async def lost(self, url: str) -> dict[str, int]:
        """Acknowledged adds not stored (must be 0), and refused ones stored anyway."""
        conn = await asyncpg.connect(**_pg(url))
        try:
            rows = await conn.fetch(
                """SELECT s.name, k.key FROM memory_key k JOIN namespace s ON s.id = k.namespace_id
                   WHERE k.key LIKE $1""",
                f"t-{self.run}-%",
            )
        finally:
            await conn.close()
        stored: dict[str, set[str]] = {}
        for r in rows:
            stored.setdefault(r["name"], set()).add(r["key"])
        return {
            "acknowledged": sum(len(v) for v in self.acknowledged.values()),
            "lost": sum(len(v - stored.get(ns, set())) for ns, v in self.acknowledged.items()),
            "refused": sum(len(v) for v in self.refused.values()),
            "refused_but_stored": sum(
                len(v & stored.get(ns, set())) for ns, v in self.refused.items()
            ),
        }


async def warm(base_url: str, namespaces: list[str]) -> None:
    """The load's robot registered in every namespace, its working memory made: a new robot
    is a row of `robot`, a reference table, which cannot be written while a worker is down
    (docs/SCALING.md); the loss is measured on robots that exist."""
    async with Http(base_url, 2) as c:
        for ns in namespaces:
            r = await c.post(
                "/v1/robots/traffic/memories",
                json={"key": "warm", "content": "warm", "embedding": [1.0] + [0.0] * 383},
                headers={"X-Namespace": ns},
            )
            assert r.status_code == 201, r.text[:300]


async def worker_loss(
    cluster: citus_cluster.Cluster, url: str, base_url: str, namespaces: list[str],
    queries: np.ndarray, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    await warm(base_url, namespaces)
    conn = await asyncpg.connect(**_pg(url))
    try:
        ports = await worker_of(conn, namespaces)
    finally:
        await conn.close()
    lost_node = cluster.workers[1]
    where = {ns: ("lost" if p == lost_node.port else "kept") for ns, p in ports.items()}
    kept = [ns for ns in namespaces if where[ns] == "kept"]
    lost = [ns for ns in namespaces if where[ns] == "lost"]
    third = seconds / 3
    # Two clients on the namespaces the stopped worker holds, two on the others: a slow
    # refusal on one side does not hold the other's requests back.
    clients = [kept, kept, lost, lost] if kept and lost else [namespaces] * 4
    async with Traffic(base_url, clients, queries) as traffic:
        t0 = time.monotonic()
        await asyncio.sleep(third)
        t1 = time.monotonic()
        await asyncio.to_thread(lost_node.stop, "immediate")
        t1_down = time.monotonic()
        await asyncio.sleep(third)
        t2 = time.monotonic()
        await asyncio.to_thread(lost_node.start)
        t3 = time.monotonic()
        await asyncio.sleep(third)
        t4 = time.monotonic()
    return {
        "namespaces": Counter(where.values()),
        "before": traffic.counts(t0, t1, where),
        "stopping": traffic.counts(t1, t1_down, where),
        "worker_down": traffic.counts(t1_down, t2, where),
        "restarting": round(t3 - t2, 1),
        "after": traffic.counts(t3, t4 + 60, where),
        "failures": traffic.failures(where),
        "writes": await traffic.lost(url),
    }


async def rebalance(
    cluster: citus_cluster.Cluster, spare: Any, url: str, database: str, base_url: str,
    namespaces: list[str], queries: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    conn = await asyncpg.connect(**_pg(url))
    try:
        before = dict(await conn.fetch(_SHARDS))
        async with Traffic(base_url, [namespaces] * 4, queries) as traffic:
            t0 = time.monotonic()
            await asyncio.sleep(3)
            t1 = time.monotonic()
            await cluster.add_worker(spare, database)
            try:  # logical replication: the shards' writes go on while they move
                await conn.execute("SELECT citus_rebalance_start()")
                mode = "auto"
            except asyncpg.PostgresError as exc:
                say(f"citus_rebalance_start(): {exc}; again with block_writes")
                await conn.execute(
                    "SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')"
                )
                mode = f"block_writes ({exc})"
            state = None
            while True:
                status = await conn.fetchrow(
                    "SELECT state FROM citus_rebalance_status() ORDER BY job_id DESC LIMIT 1"
                )
                state = status["state"] if status else None
                if state in ("finished", "failed", "cancelled", None):
                    break
                await asyncio.sleep(0.2)
            t2 = time.monotonic()
            await asyncio.sleep(3)
            t3 = time.monotonic()
        after = dict(await conn.fetch(_SHARDS))
    finally:
        await conn.close()
    where = {ns: "any" for ns in namespaces}
    return {
        "state": state,
        "mode": mode,
        "seconds": round(t2 - t1, 2),
        "shards_before": {str(k): v for k, v in before.items()},
        "shards_after": {str(k): v for k, v in after.items()},
        "before": traffic.counts(t0, t1, where),
        "during": traffic.counts(t1, t2, where),
        "after": traffic.counts(t2, t3 + 60, where),
        "failures": traffic.failures(where),
        "writes": await traffic.lost(url),
    }


# Shards of `memory` per worker port.
_SHARDS = """
    SELECT n.nodeport, count(*) FROM pg_dist_shard s
    JOIN pg_dist_placement p ON p.shardid = s.shardid
    JOIN pg_dist_node n ON n.groupid = p.groupid
    WHERE s.logicalrelid = 'memory'::regclass GROUP BY 1 ORDER BY 1"""


def _keep_logs(base: Path) -> None:
    """The services' logs, kept under .htm/bench/citus for a look after."""
    logs = BENCH_DIR / "citus"
    logs.mkdir(parents=True, exist_ok=True)
    for log in base.glob("*.log"):
        shutil.copy(log, logs / log.name)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from app.db.migrate import upgrade

    version = citus_cluster.available()
    rng = np.random.default_rng(args.seed)
    queries = vectors(rng, 500)
    namespaces = [f"ns{i:02d}" for i in range(args.namespaces)]
    base = Path(tempfile.mkdtemp(prefix="htm-bench-citus-"))
    redis = EmbeddedRedis(base / "redis", persistent=False).start()
    cluster = await asyncio.to_thread(citus_cluster.make_cluster, base / "citus", 2)
    [plain, spare] = await asyncio.to_thread(
        citus_cluster.make_servers, base / "other", ["plain", "spare"]
    )
    # the plain one without Citus loaded at all
    plain.stop()
    conf = plain.data / "postgresql.conf"
    conf.write_text(conf.read_text().replace("shared_preload_libraries = 'citus'", ""))
    plain.start()
    results: dict[str, Any] = {
        "citus": version,
        "namespaces": args.namespaces,
        "per_namespace": args.per,
    }
    try:
        database = "htm_bench"
        citus_url = await cluster.database(database)
        await plain.sql(f'CREATE DATABASE "{database}"', database="postgres")
        plain_url = plain.url.rsplit("/", 1)[0] + f"/{database}"
        urls = {"plain": plain_url, "citus": citus_url}
        for name, url in urls.items():
            await asyncio.to_thread(upgrade, url)
            svc = await ServiceProcess(
                url, redis.url, base / f"load-{name}.log", **SETTINGS
            ).start()
            try:
                results[f"load_{name}_s"] = round(
                    await load(svc.base_url, namespaces, args.per, args.seed), 1
                )
            finally:
                svc.stop()
            say(f"{name}: loaded in {results[f'load_{name}_s']} s")
        for name, url in urls.items():
            results[f"size_{name}"] = await bytes_per_memory(url, name == "citus")
        for r in range(args.rounds):
            for name, url in urls.items():
                svc = await ServiceProcess(
                    url, redis.url, base / f"{name}-{r}.log", **SETTINGS
                ).start()
                try:
                    got = await service_phases(svc.base_url, namespaces, queries, args.seconds)
                finally:
                    svc.stop()
                results.setdefault(f"{name}_rounds", []).append(got)
                say(
                    f"{name}, round {r + 1}: vector p50 {got['recall_vector_c1']['p50_ms']:.2f}"
                    f" ms, hybrid p50 {got['recall_hybrid_c1']['p50_ms']:.2f} ms,"
                    f" adds c=8 {got['add_c8']['throughput']:.0f}/s"
                    f" ({got['add_unplaced_c8']['throughput']:.0f}/s not placed)"
                )
        svc = await ServiceProcess(citus_url, redis.url, base / "loss.log", **SETTINGS).start()
        try:
            results["worker_loss"] = await worker_loss(
                cluster, citus_url, svc.base_url, namespaces, queries, args.loss_seconds
            )
            say(f"worker loss: {json.dumps(results['worker_loss'])}")
            results["rebalance"] = await rebalance(
                cluster, spare, citus_url, database, svc.base_url, namespaces, queries
            )
            say(f"rebalance: {json.dumps(results['rebalance'])}")
        finally:
            svc.stop()
    finally:
        redis.stop()
        cluster.stop()
        plain.stop("immediate")
        spare.stop("immediate")
        _keep_logs(base)
        shutil.rmtree(base, ignore_errors=True)
    summary: dict[str, Any] = {}
    for key, field in (
        ()
        if not args.rounds
        else (
            ("recall_vector_c1", "p50_ms"),
            ("recall_hybrid_c1", "p50_ms"),
            ("add_c8", "throughput"),
            ("add_unplaced_c8", "throughput"),
        )
    ):
        for name in ("plain", "citus"):
            vals = [x[key][field] for x in results[f"{name}_rounds"]]
            summary[f"{key}_{field}_{name}"] = [round(v, 2) for v in vals]
        p = float(np.median(summary[f"{key}_{field}_plain"]))
        c = float(np.median(summary[f"{key}_{field}_citus"]))
        summary[f"{key}_{field}_citus_over_plain"] = round(c / p, 2)
    summary["bytes_per_memory_citus_over_plain"] = round(
        results["size_citus"]["per_memory"] / results["size_plain"]["per_memory"], 2
    )
    results["summary"] = summary
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.citus", description=__doc__)
    p.add_argument("--namespaces", type=int, default=16)
    p.add_argument("--per", type=int, default=400, help="memories per namespace")
    p.add_argument("--seconds", type=float, default=8.0, help="per timed phase")
    p.add_argument("--rounds", type=int, default=2, help="plain and Citus, alternated")
    p.add_argument("--loss-seconds", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=20261207)
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a service setting for every service started (e.g. group_commit_flushes=8)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    SETTINGS.update(dict(s.split("=", 1) for s in args.setting))
    if citus_cluster.available() is None:
        say("citus is not installed in the embedded PostgreSQL binaries (docs/SCALING.md)")
        return 2
    results = asyncio.run(run(args))
    text = json.dumps(results, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
