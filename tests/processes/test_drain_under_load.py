"""A stop under load answers every request (issue 43, item 4).

Eight clients, each on one kept-alive connection, add memories and recall against a real
`htm serve` (one process, then `--workers 3`); SIGTERM in the middle of it. Every request a
client sent gets an HTTP response: the ones in flight their own answer, the ones that arrive
during the drain a 503 problem+json with Retry-After and `Connection: close`. Once the port
is closed a client's connect is refused, which tells it the request was never sent. And
every add acknowledged with 201 is in PostgreSQL afterwards.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.config import Settings
from app.db.engine import create_engine
from tests.htm_process import Served
from tests.stubs import Recorded, StubServer

CLIENTS = 8
VECTOR = [1.0] + [0.0] * 383


def embeddings(req: Recorded) -> tuple[int, object]:
    return 200, {"data": [{"index": i, "embedding": VECTOR} for i in range(len(req.body["input"]))]}


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    acknowledged: list[str] = field(default_factory=list)  # keys of the adds answered 201
    unanswered: list[str] = field(default_factory=list)  # sent, then no HTTP response
    refused: int = 0  # connects refused: nothing was sent
    drained: list[httpx.Response] = field(default_factory=list)  # the drain's 503s


async def client(i: int, url: str, ns: str, tally: Tally, signalled: asyncio.Event) -> None:
    """Adds and recalls in turn on one kept-alive connection, until the port is closed."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(
        base_url=url, headers={"X-Namespace": ns}, timeout=30, limits=limits
    ) as http:
        for n in range(100_000):
            key = f"c{i}-{n}"
            body: dict[str, Any]
            if n % 2 == 0:
                path, body = f"/v1/robots/r{i}/memories", {"key": key, "content": f"note {key}"}
            else:
                path, body = f"/v1/robots/r{i}/recall", {"query": "note", "limit": 5}
            try:
                r = await http.post(path, json=body)
            except httpx.ConnectError:
                tally.refused += 1
                assert signalled.is_set(), "refused before the stop"
                return
            except httpx.HTTPError as exc:
                tally.unanswered.append(f"{path} {key}: {type(exc).__name__} {exc}")
                continue
            tally.statuses[r.status_code] += 1
            if r.status_code == 201:
                tally.acknowledged.append(key)
            elif r.status_code == 503:
                tally.drained.append(r)


async def stored(database_url: str, ns: str, keys: list[str]) -> set[str]:
    engine = create_engine(Settings(_env_file=None, database_url=database_url))
    try:
        async with engine.connect() as conn:
            query = text(
                "SELECT m.key FROM memory m JOIN namespace n ON n.id = m.namespace_id "
                "WHERE n.name = :ns AND m.key = ANY(:keys)"
            )
            rows = await conn.execute(query, {"ns": ns, "keys": keys})
            return {row[0] for row in rows}
    finally:
        await engine.dispose()


@pytest.mark.parametrize("args", [[], ["--workers", "3"]], ids=["one-process", "workers-3"])
async def test_a_stop_under_load_answers_every_request_and_keeps_every_acknowledged_add(
    tmp_path, database_url: str, redis_url: str, stub: StubServer, args: list[str]
) -> None:
    stub.reply = embeddings
    stub.delay_s = 0.02  # each add and recall waits on the embedder: requests are in flight
    served = Served(
        tmp_path / "d",
        settings={
            "database_url": database_url,
            "redis_url": redis_url,
            "embedding_provider": "openai",
            "embedding_model": "stub-embed",
            "embedding_url": stub.url,
            "embedding_batch_wait_ms": "0",
            "log_level": "warning",
        },
        args=args,
    )
    ns = f"t-{uuid.uuid4().hex[:10]}"
    tally = Tally()
    signalled = asyncio.Event()
    clients: list[asyncio.Task[None]] = []
    try:
        await asyncio.to_thread(served.start)
        assert served.proc is not None
        clients += [
            asyncio.create_task(client(i, served.url, ns, tally, signalled)) for i in range(CLIENTS)
        ]
        while sum(tally.statuses.values()) < 60:  # under way on every connection
            await asyncio.sleep(0.05)
            assert not any(c.done() for c in clients), [c.exception() for c in clients]
        sent_at = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        signalled.set()
        await asyncio.wait_for(asyncio.gather(*clients), 60)
        status = await asyncio.to_thread(served.proc.wait, 60)
        took = time.monotonic() - sent_at
    finally:
        for c in clients:
            c.cancel()
        served.kill()
    print(
        f"\n{args or 'one process'}: {dict(tally.statuses)}, unanswered "
        f"{len(tally.unanswered)}, refused {tally.refused}, TERM to exit {took:.2f} s"
    )
    log = served.log()
    assert status == 0, log
    assert tally.unanswered == [], log
    assert set(tally.statuses) <= {200, 201, 503}, (tally.statuses, log)
    for r in tally.drained:
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["retry-after"] == "1"
        assert r.headers["connection"] == "close"
        assert r.json() == {
            "type": "https://htm.dev/problems/unavailable",
            "title": "Service unavailable",
            "status": 503,
            "detail": "the service is shutting down; the request was not processed: retry it",
            "draining": True,
        }
    assert await stored(database_url, ns, tally.acknowledged) == set(tally.acknowledged)
    assert took < 10, log
