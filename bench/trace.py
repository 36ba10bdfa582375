"""`python -m bench.trace`: are the floors still the service's statements?

The floor (bench/floor.py) mirrors by hand what one service request sends to PostgreSQL.
When the service changes, run this: it turns on log_statement in a scratch database of the
embedded PostgreSQL, sends each operation once to the service and once through the floor
(after two warm-up calls of each), and prints the two statement lists side by side from the
server log. Lines should differ only by the prepared-statement names (an extra
`BEGIN; ROLLBACK;` per checkout on the service's side would be SQLAlchemy's pool pre-ping,
which the floor leaves out on purpose).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from bench import dataset
from bench.base import vec_list
from bench.floor import AddItem, Floor, RecallSpec
from bench.http import Http
from bench.infra import BENCH_DIR, Servers, ServiceProcess, admin, floor_pool, fresh_database

DB = "htm_bench_trace"
QUESTION = "When did Caroline go to the support group?"


def _statements(log: str) -> list[str]:
    out = []
    for line in log.splitlines():
        for marker in ("LOG:  statement: ", "LOG:  execute "):
            if marker in line:
                text = line.split(marker, 1)[1]
                out.append(" ".join(text.split())[:100])
    return out


async def _trace(servers: Servers) -> None:
    assert servers.pg is not None, "bench.trace reads the embedded server's log"
    url = await fresh_database(servers, DB)
    await admin(url, f"ALTER DATABASE {DB} SET log_statement = 'all'")
    redis = aioredis.from_url(servers.redis_url, decode_responses=True)
    await redis.flushdb()
    service = ServiceProcess(
        url, servers.redis_url, BENCH_DIR / "logs" / "trace.log", embedding_provider="none"
    )
    log_path = servers.pg.data_dir / "log"
    pool = None
    try:
        await service.start()
        async with Http(service.base_url, 4) as c:
            m = dataset.scale_memories(1, 50)
            body = {
                "memories": [
                    {"key": f"k{i}", "content": m.contents[i], "embedding": vec_list(m.vectors[i])}
                    for i in range(50)
                ]
            }
            assert (await c.post("/v1/robots/a/memories/batch", json=body)).status_code == 201
            pool = await floor_pool(url, 2)
            async with pool.acquire() as conn:
                ns = await conn.fetchval("SELECT id FROM namespace WHERE name = 'default'")
            floor = Floor(pool, redis, "default", ns, 128_000)
            q = vec_list(m.vectors[3])
            counter = itertools.count()

            def recall(strategy: str, load: bool) -> tuple[Callable[[], Awaitable[Any]], ...]:
                body = {"query": QUESTION, "strategy": strategy, "limit": 10, "embedding": q}
                body["load_into_working_memory"] = load
                spec = RecallSpec(strategy, QUESTION, q, False, None, None, 10, load)
                robot = "loader" if load else "reader"
                return (
                    lambda: c.post(f"/v1/robots/{robot}/recall", json=body),
                    lambda: floor.recall(robot if not load else "f" + robot, spec),
                )

            def add() -> tuple[Callable[[], Awaitable[Any]], ...]:
                def text() -> str:
                    return f"note number {next(counter)}"

                def body() -> dict[str, Any]:
                    return {"content": text(), "embedding": q}

                return (
                    lambda: c.post("/v1/robots/w/memories", json=body()),
                    lambda: floor.add("fw", [AddItem(text(), 3, q)]),
                )

            cases: dict[str, tuple[Callable[[], Awaitable[Any]], ...]] = {
                "recall vector": recall("vector", False),
                "recall fulltext": recall("fulltext", False),
                "recall hybrid": recall("hybrid", False),
                "recall hybrid + load": recall("hybrid", True),
                "add": add(),
                "retrieve": (
                    lambda: c.get("/v1/robots/reader/memories/k5"),
                    lambda: floor.retrieve("reader", "k5"),
                ),
                "context": (lambda: c.get("/v1/robots/a/context"), lambda: floor.context("a")),
                "robot stats": (
                    lambda: c.get("/v1/robots/a/stats"),
                    lambda: floor.robot_stats("a"),
                ),
                "namespace stats": (lambda: c.get("/v1/stats"), floor.namespace_stats),
            }
            for name, (via_service, via_floor) in cases.items():
                lists = []
                for fn in (via_service, via_floor):
                    for _ in range(2):  # warm-up: caches, prepared statements, first use
                        await fn()
                    await asyncio.sleep(0.3)
                    pos = log_path.stat().st_size
                    r = await fn()
                    if hasattr(r, "status_code") and r.status_code >= 300:
                        raise RuntimeError(f"{name}: HTTP {r.status_code} {r.text[:200]}")
                    await asyncio.sleep(0.3)
                    with log_path.open() as fh:
                        fh.seek(pos)
                        lists.append(_statements(fh.read()))
                print(f"\n== {name}: service {len(lists[0])} statements, floor {len(lists[1])}")
                for a, b in itertools.zip_longest(*lists, fillvalue=""):
                    print(f"  {a[:60]:<62}| {b[:60]}")
    finally:
        service.stop()
        if pool is not None:
            await pool.close()
        await redis.aclose()
        await admin(servers.server_url, f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


def main() -> None:
    import uvloop

    servers = Servers.start()
    try:
        uvloop.run(_trace(servers))
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
