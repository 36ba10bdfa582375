"""`python -m bench.wm_bytes [--redis-url URL]`: bytes of Redis per working-memory item.

Loads one robot's working memory with N items of a known content size through the service's
own store (`WorkingMemoryStore.load`, the same Lua as production), then reads `MEMORY USAGE
<key> SAMPLES 0` of each of the robot's keys (htm:v2:{ns/robot}:…) and the change of INFO's
`used_memory`. Prints one JSON line per (N, content size) and a table; docs/SCALING.md sizes
Redis from it. Uses a namespace of its own and deletes its keys afterwards (it never flushes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import redis.asyncio as aioredis

from app.working_memory.items import WMItem
from app.working_memory.store import WorkingMemoryStore, robot_keys

NS = "wmbytes"


async def measure(r: aioredis.Redis, n: int, size: int) -> dict[str, Any]:
    store = WorkingMemoryStore(r)
    robot = f"r{n}-{size}"
    keys = robot_keys(NS, robot)
    await r.delete(*keys)
    now_us = int(time.time() * 1e6)
    content = ("x" * (size - 1)) + " "
    items = [
        WMItem(
            key=f"mem-{i:08d}",  # 12 characters, like a short client key
            content=content,
            tokens=max(1, size // 4),
            importance=float(i % 10),
            added_at_us=now_us + i,
            last_access_ms=now_us // 1000,
            memory_id=10_000_000 + i,
        )
        for i in range(n)
    ]
    before = int((await r.info("memory"))["used_memory"])
    for start in range(0, n, 1000):  # load the first chunk, place the rest (as adds would)
        chunk = items[start : start + 1000]
        if start == 0:
            await store.load(NS, robot, chunk, budget=10**12)
        else:
            await store.place(NS, robot, chunk, budget=10**12)
    after = int((await r.info("memory"))["used_memory"])
    per_key: dict[str, int] = {}
    encodings: dict[str, str] = {}
    for field, key in zip(keys._fields, keys, strict=True):
        per_key[field] = int(await r.memory_usage(key, samples=0) or 0)
        encodings[field] = await r.object("encoding", key)
    total = sum(per_key.values())
    await r.delete(*keys)
    return {
        "items": n,
        "content_bytes": size,
        "memory_usage_bytes": total,
        "per_item_bytes": total / n,
        "overhead_per_item_bytes": (total - n * size) / n,
        "used_memory_delta_per_item": (after - before) / n,
        "per_key": per_key,
        "encodings": encodings,
    }


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wm_bytes", description=__doc__)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    p.add_argument("--items", default="100,1000,10000")
    p.add_argument("--sizes", default="100,500,2000")
    args = p.parse_args(argv)
    r = aioredis.from_url(args.redis_url, decode_responses=True)
    try:
        version = (await r.info("server"))["redis_version"]
        rows = []
        for n in (int(x) for x in args.items.split(",")):
            for size in (int(x) for x in args.sizes.split(",")):
                row = await measure(r, n, size)
                rows.append(row)
                print(json.dumps({"redis": version, **row}), flush=True)
    finally:
        await r.aclose()
    print(f"\nRedis {version}: bytes per working-memory item (MEMORY USAGE, all 9 keys)\n")
    print("| items | content bytes | per item | overhead per item | used_memory Δ per item |")
    print("|---:|---:|---:|---:|---:|")
    for x in rows:
        print(
            f"| {x['items']:,} | {x['content_bytes']:,} | {x['per_item_bytes']:.0f} | "
            f"{x['overhead_per_item_bytes']:.0f} | {x['used_memory_delta_per_item']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
