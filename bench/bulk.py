"""Bulk loading against its floor, and what a loaded database weighs.

- `copy_floor`: a raw COPY of the first K memories of the dataset into fresh copies of the
  tables (`CREATE TABLE … (LIKE … INCLUDING ALL)`: the same columns, defaults, generated
  tsvector, checks and indexes, HNSW and GIN included, autovacuum on as on the real tables;
  no triggers, no foreign keys), in the
  loader's shape: batches of the load's size, each its own transaction, as many in flight as
  the loader. Two variants: `memory` alone (the issue's "raw COPY into the same table with
  its indexes"), and `memory` + `memory_key` + `memory_event` (the three tables an add writes)
  in one transaction per batch. The batch endpoint's rate over the same first K memories of
  the real load is recorded by `bench.scale.load_memories`; the ratio is the target.
- `relation_sizes`: every table of the schema with its heap, TOAST and index bytes, and each
  index alone, with the row estimate after VACUUM ANALYZE, so bytes per row can be derived.
- `process_memory`: RSS / PSS of the PostgreSQL server (postmaster and every backend), the
  service's RSS, and Redis's INFO memory.
"""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from bench import dataset

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is in the dev dependencies
    psutil = None  # type: ignore[assignment]

_COPY_TABLES = {"memory": "bench_copy_memory", "memory_key": "bench_copy_memory_key",
                "memory_event": "bench_copy_memory_event"}  # fmt: skip
_MEMORY_COLUMNS = (
    "id", "created_at", "namespace_id", "key", "content", "type", "importance", "tags",
    "metadata", "author_robot_id", "token_count", "embedding", "embedding_status",
)  # fmt: skip


def _tags_literal(tags: list[str]) -> str:
    return (
        "{" + ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in tags) + "}"
    )


def _csv_batches(
    mem: dataset.ScaleMemories,
    idx: list[int],
    keys: list[str],
    tokens: list[int],
    author_id: int,
    ns_id: int,
    vec: Callable[[Any], str],
) -> tuple[bytes, bytes, bytes]:
    """(memory, memory_key, memory_event) rows of one batch as CSV."""
    m, k, e = io.StringIO(), io.StringIO(), io.StringIO()
    wm, wk, we = csv.writer(m), csv.writer(k), csv.writer(e)
    for i in idx:
        at = mem.created_at[i].isoformat()
        wm.writerow(
            (i + 1, at, ns_id, keys[i], mem.contents[i], mem.types[i], float(mem.importance[i]),
             _tags_literal(mem.tags[i]), "{}", author_id, tokens[i], vec(mem.vectors[i]),
             "ready")
        )  # fmt: skip
        wk.writerow((ns_id, keys[i], i + 1, at))
        we.writerow((at, ns_id, author_id, i + 1, "add"))
    return m.getvalue().encode(), k.getvalue().encode(), e.getvalue().encode()


async def _fresh_copies(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        for source, copy in _COPY_TABLES.items():
            await conn.execute(f"DROP TABLE IF EXISTS {copy}")
            # Autovacuum stays on, as it is on the real tables while the endpoint loads them
            # (an earlier floor turned it off for the copies only: a cost the floor skipped).
            await conn.execute(f"CREATE TABLE {copy} (LIKE {source} INCLUDING ALL)")


async def drop_copies(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        for copy in _COPY_TABLES.values():
            await conn.execute(f"DROP TABLE IF EXISTS {copy}")


async def copy_floor(
    pool: asyncpg.Pool,
    mem: dataset.ScaleMemories,
    batches: list[tuple[str, list[int]]],
    keys: list[str],
    tokens: list[int],
    ns_id: int,
    k: int,
    in_flight: int,
    vec: Callable[[Any], str],
    meter: Any = None,
    repeats: int = 2,
) -> dict[str, Any]:
    """Memories/s of a raw COPY of the first k memories (the batches covering them), per
    variant, and (with a `bench.infra.CpuMeter`) CPU ms per memory by process. Formatting
    the CSV is timed, as the loader's JSON is. The variants run in turn `repeats` times and
    each keeps its fastest run (a floor is the best the server did; single runs of 50,000
    moved by up to 20 % between runs on the 2-core VM); every run is kept in `runs`."""
    chosen, count = [], 0
    for robot, idx in batches:
        if count >= k:
            break
        chosen.append((robot, idx))
        count += len(idx)
    authors = {robot: i + 1 for i, robot in enumerate(sorted({r for r, _ in chosen}))}
    out: dict[str, Any] = {"memories": count, "batches": len(chosen), "in_flight": in_flight}
    variants = {"memory": ("memory",), "memory_key_event": ("memory", "memory_key", "event")}
    for variant, tables in list(variants.items()) * max(1, repeats):
        await _fresh_copies(pool)
        async with pool.acquire() as conn:
            await conn.execute("CHECKPOINT")
        queue = list(reversed(chosen))

        async def worker(queue: list[Any], tables: tuple[str, ...]) -> None:
            async with pool.acquire() as conn:
                while queue:
                    robot, idx = queue.pop()
                    data = _csv_batches(mem, idx, keys, tokens, authors[robot], ns_id, vec)
                    async with conn.transaction():
                        if "memory_key" in tables:
                            await conn.copy_to_table(
                                _COPY_TABLES["memory_key"], source=io.BytesIO(data[1]),
                                columns=("namespace_id", "key", "memory_id", "memory_created_at"),
                                format="csv",
                            )  # fmt: skip
                            await conn.copy_to_table(
                                _COPY_TABLES["memory_event"], source=io.BytesIO(data[2]),
                                columns=("at", "namespace_id", "robot_id", "memory_id", "kind"),
                                format="csv",
                            )  # fmt: skip
                        await conn.copy_to_table(
                            _COPY_TABLES["memory"], source=io.BytesIO(data[0]),
                            columns=_MEMORY_COLUMNS, format="csv",
                        )  # fmt: skip

        before = await meter.sample() if meter is not None else None
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(queue, tables) for _ in range(in_flight)))
        seconds = time.perf_counter() - t0
        run: dict[str, Any] = {"seconds": seconds, "memories_per_s": count / seconds}
        if meter is not None:
            run["cpu_ms_per_memory"] = meter.per_request(
                before, await meter.sample(), count, seconds
            )
        runs = [*out.get(variant, {}).get("runs", []), run]
        out[variant] = {**max(runs, key=lambda r: r["memories_per_s"]), "runs": runs}
    await drop_copies(pool)
    async with pool.acquire() as conn:
        await conn.execute("CHECKPOINT")
    return out


_TABLE_SIZES = """
    SELECT c.relname AS name, c.reltuples::bigint AS rows,
           pg_relation_size(c.oid) AS heap_bytes,
           pg_table_size(c.oid) - pg_relation_size(c.oid) AS toast_fsm_vm_bytes,
           pg_indexes_size(c.oid) AS index_bytes,
           pg_total_relation_size(c.oid) AS total_bytes
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
    ORDER BY pg_total_relation_size(c.oid) DESC"""

_INDEX_SIZES = """
    SELECT t.relname AS "table", i.relname AS name, am.amname AS method,
           pg_relation_size(i.oid) AS bytes
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
    JOIN pg_am am ON am.oid = i.relam JOIN pg_namespace n ON n.oid = t.relnamespace
    WHERE n.nspname = current_schema()
    ORDER BY pg_relation_size(i.oid) DESC"""


async def relation_sizes(pool: asyncpg.Pool) -> dict[str, Any]:
    """Every table (heap, TOAST + maps, indexes, total) and every index, in bytes. On a
    TimescaleDB hypertable the parent holds no rows: use hypertable_detailed_size there."""
    async with pool.acquire() as conn:
        tables = [dict(r) for r in await conn.fetch(_TABLE_SIZES)]
        indexes = [dict(r) for r in await conn.fetch(_INDEX_SIZES)]
        database = await conn.fetchval("SELECT pg_database_size(current_database())")
    return {"tables": tables, "indexes": indexes, "database_bytes": database}


def _tree_memory(pid: int | None, children: bool) -> dict[str, Any] | None:
    if psutil is None or pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)] if children else [root]
        rss = pss = 0
        for p in procs:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
        return {"processes": len(procs), "rss_bytes": rss, "pss_bytes": pss}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


async def process_memory(
    postmaster_pid: int | None, service_pid: int | None, redis: Any
) -> dict[str, Any]:
    """RAM as the OS sees it. PostgreSQL's RSS counts the shared buffers once per backend
    that touched them; PSS shares them out, so the PSS sum is the server's real footprint."""
    info = await redis.info("memory")
    keys = await redis.dbsize()
    return {
        "postgres": _tree_memory(postmaster_pid, children=True),
        "service": _tree_memory(service_pid, children=True),
        "redis": {
            "used_memory": int(info["used_memory"]),
            "used_memory_rss": int(info["used_memory_rss"]),
            "used_memory_dataset": int(info.get("used_memory_dataset", 0)),
            "keys": int(keys),
        },
    }


async def working_memory_bytes(redis: Any, keys: list[str]) -> dict[str, Any]:
    """MEMORY USAGE of one robot's keys (the bench's `ctx` robot: 1,000 items)."""
    per_key = {k.rsplit(":", 1)[1]: int(await redis.memory_usage(k, samples=0) or 0) for k in keys}
    items = int(await redis.zcard(keys[6]))  # evict
    content = sum(len(v.encode()) for v in await redis.hvals(keys[0]))
    total = sum(per_key.values())
    return {"items": items, "bytes": total, "content_bytes": content,
            "per_item": total / items if items else None, "per_key": per_key}  # fmt: skip
