"""The access-count flush at N memories (issue 43): how long writing the counts of ~300
recalled memories takes, and whether its updates are HOT (no new entry in any index).

    .venv/bin/python -m bench.access_counts                 # N = 100,000; 300 rows a flush
    .venv/bin/python -m bench.access_counts --n 20000 --out /tmp/access.json
    .venv/bin/python -m bench.access_counts --keep      # keep the loaded database, and then
    .venv/bin/python -m bench.access_counts --reuse     # measure it again, migrated to head

Loads N memories of the bench's dataset (`bench.dataset.scale_memories`: its contents, tags
and 384-dim vectors, in time order) into a fresh migrated database with COPY, the HNSW index
built after the load, then VACUUM ANALYZE. Then `--rounds` times: `--rows` memories drawn at
random are flushed as app/memories/access.py flushes (`AccessRepository.add` in a transaction
of its own, through the service's engine), a first time and then again. Per flush: its time
(the statement and the commit), and the tuples it inserted, updated and HOT-updated in
each table (`pg_stat_get_xact_tuples_*` before and after the statement, before the commit).
Embedded PostgreSQL as the other benches (`bench.infra.Servers`). `--reuse` measures a
database kept by `--keep` (by an earlier version of the code, say) after migrating it to
head: the same rows on the same pages, before and after a change."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import text

from app.config import Settings
from app.db.engine import create_engine
from app.db.session import create_sessionmaker
from app.memories.access_repository import AccessRepository
from bench import dataset
from bench.infra import Servers, asyncpg_kwargs, drop_database, fresh_database, kept_database

DB = "htm_bench_access"
TABLES = ("memory", "memory_access")
COUNTS = ("ins", "upd", "hot")
_XACT = """
    SELECT c.relname AS name, pg_stat_get_xact_tuples_inserted(c.oid) AS ins,
           pg_stat_get_xact_tuples_updated(c.oid) AS upd,
           pg_stat_get_xact_tuples_hot_updated(c.oid) AS hot
    FROM pg_class c WHERE c.relname = ANY(:tables) AND c.relkind IN ('r', 'p')"""


def _vector(v: Any) -> str:
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


async def load(url: str, n: int, seed: int) -> None:
    mem = dataset.scale_memories(seed, n)
    conn = await asyncpg.connect(**asyncpg_kwargs(url), timeout=30)
    try:
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('bench') RETURNING id")
        robot = await conn.fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'loader') RETURNING id", ns
        )
        hnsw = await conn.fetchval("SELECT pg_get_indexdef('memory_embedding_hnsw'::regclass)")
        await conn.execute("DROP INDEX memory_embedding_hnsw")
        for start in range(0, n, 5000):
            rows, keys = io.StringIO(), io.StringIO()
            wm, wk = csv.writer(rows), csv.writer(keys)
            for i in range(start, min(n, start + 5000)):
                at = mem.created_at[i].isoformat()
                tags = "{" + ",".join(f'"{t}"' for t in mem.tags[i]) + "}"
                wm.writerow(
                    (i + 1, at, ns, f"k{i}", mem.contents[i], mem.types[i],
                     float(mem.importance[i]), tags, "{}", robot,
                     len(mem.contents[i].split()), _vector(mem.vectors[i]), "ready")
                )  # fmt: skip
                wk.writerow((ns, f"k{i}", i + 1, at))
            async with conn.transaction():
                await conn.copy_to_table(
                    "memory_key", source=io.BytesIO(keys.getvalue().encode()), format="csv",
                    columns=("namespace_id", "key", "memory_id", "memory_created_at"),
                )  # fmt: skip
                await conn.copy_to_table(
                    "memory", source=io.BytesIO(rows.getvalue().encode()), format="csv",
                    columns=("id", "created_at", "namespace_id", "key", "content", "type",
                             "importance", "tags", "metadata", "author_robot_id",
                             "token_count", "embedding", "embedding_status"),
                )  # fmt: skip
        await conn.execute(f"SELECT setval('memory_id_seq', {n})")
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(hnsw)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def measure(url: str, n: int, rows: int, rounds: int, seed: int) -> list[dict[str, Any]]:
    engine = create_engine(Settings(database_url=url, embedding_provider="none"))
    sessionmaker = create_sessionmaker(engine)
    rng = random.Random(seed)
    flushes = []
    try:
        for r in range(rounds):
            ids = sorted(rng.sample(range(1, n + 1), rows))
            for kind in ("first", "again"):
                at = datetime.now(UTC)
                async with sessionmaker() as session, session.begin():
                    # The xact counters also hold earlier transactions' counts this backend
                    # has not reported yet: the flush's are the difference.
                    before = (await session.execute(text(_XACT), {"tables": list(TABLES)})).all()
                    t0 = time.perf_counter()
                    await AccessRepository(session).add(ids, [1] * rows, [at] * rows)
                    statement_s = time.perf_counter() - t0
                    stats = (await session.execute(text(_XACT), {"tables": list(TABLES)})).all()
                    t1 = time.perf_counter()
                commit_s = time.perf_counter() - t1
                was = {s.name: s for s in before}
                tables = {
                    s.name: {k: getattr(s, k) - getattr(was[s.name], k) for k in COUNTS}
                    for s in stats
                }
                flushes.append(
                    {"round": r, "kind": kind, "rows": rows,
                     "ms": round((statement_s + commit_s) * 1000, 2), "tables": tables}
                )  # fmt: skip
                print(json.dumps(flushes[-1]))
    finally:
        await engine.dispose()
    return flushes


def summary(flushes: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("first", "again"):
        mine = [f for f in flushes if f["kind"] == kind]
        per_table: dict[str, dict[str, int]] = {}
        for f in mine:
            for name, t in f["tables"].items():
                acc = per_table.setdefault(name, {"ins": 0, "upd": 0, "hot": 0})
                for k in acc:
                    acc[k] += t[k]
        out[kind] = {
            "median_ms": statistics.median(f["ms"] for f in mine),
            "ms": [f["ms"] for f in mine],
            "tables": per_table,
        }
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--out", default=None, help="write the flushes and summary as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the database for --reuse")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database")
    args = parser.parse_args()
    servers = Servers.start()
    try:
        url = await kept_database(servers, DB, args.n) if args.reuse else None
        if url is None:
            url = await fresh_database(servers, DB)
            t0 = time.perf_counter()
            await load(url, args.n, args.seed)
            print(f"loaded {args.n} memories in {time.perf_counter() - t0:.0f} s")
        flushes = await measure(url, args.n, args.rows, args.rounds, args.seed)
        result = {"n": args.n, "flushes": flushes, "summary": summary(flushes)}
        print(json.dumps(result["summary"], indent=2))
        if args.out:
            await asyncio.to_thread(Path(args.out).write_text, json.dumps(result, indent=2))
        if not args.keep:
            await drop_database(servers, DB)
    finally:
        servers.stop()


if __name__ == "__main__":
    asyncio.run(main())
