"""The embedding worker (app/memories/embedding_worker.py) against a real OpenAI-compatible
HTTP server standing in for the provider: leases, bisection of refused batches, a terminal
'failed' status, backoff that cannot overflow, and no row lock held across the provider call.

Each test runs on a database of its own: the worker serves every namespace."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text

from app.memories.embedding_worker import MAX_ATTEMPTS
from tests.stubs import Recorded, StubServer


def one_hot(i: int) -> list[float]:
    v = [0.0] * 384
    v[i % 384] = 1.0
    return v


def healthy_except(poison: str):  # type: ignore[no-untyped-def]
    """A provider that answers 400 to any batch holding the poison text."""

    def reply(req: Recorded) -> tuple[int, dict]:
        texts = req.body["input"]
        if any(poison in t for t in texts):
            return 400, {"error": {"message": "input rejected"}}
        return 200, {"data": [{"index": i, "embedding": one_hot(i)} for i in range(len(texts))]}

    return reply


@pytest.fixture
async def client(
    app_factory, database_factory, stub: StubServer
) -> AsyncIterator[httpx.AsyncClient]:
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    stub.reply = lambda _req: (503, {"error": "overloaded"})
    async with app_factory(
        database_url=url,
        embedding_provider="openai",
        embedding_model="stub-embed",
        embedding_url=stub.url,
        embedding_timeout_s=2,
        embedding_worker_interval_s=3600,  # the tests run each pass themselves
    ) as c:
        c.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        yield c


async def add_pending(client, keys: list[str]) -> None:
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={"memories": [{"key": k, "content": f"note {k}"} for k in keys]},
    )
    assert r.status_code == 201, r.text
    assert {m["embedding_status"] for m in r.json()["memories"]} == {"pending"}


async def statuses(client) -> dict[str, tuple[str, int]]:
    async with client.app.state.components.sessionmaker() as s:
        rows = await s.execute(
            text("SELECT key, embedding_status, embedding_attempts FROM memory ORDER BY key")
        )
        return {r.key: (r.embedding_status, r.embedding_attempts) for r in rows}


async def time_passes(client) -> None:
    """Every backoff and lease ends now."""
    async with client.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(text("UPDATE memory SET embedding_next_at = now() - interval '1 s'"))


async def test_one_refused_text_does_not_keep_the_others_out_and_ends_failed(
    client, stub: StubServer
) -> None:
    keys = [f"k{i}" for i in range(7)]
    await add_pending(client, keys)
    stub.reply = healthy_except("note k3")
    stub.requests.clear()
    res = client.app.state.components

    assert await res.embedding_worker.run_once() == 6
    # 7 -> (3 ok, 4 refused) -> (k3+k4 refused -> k3 refused, k4 ok), (k5+k6 ok).
    assert [len(r.body["input"]) for r in stub.requests] == [7, 3, 4, 2, 1, 1, 2]
    assert await statuses(client) == {
        **{k: ("ready", 0) for k in keys if k != "k3"},
        "k3": ("pending", 1),
    }
    for attempt in range(2, MAX_ATTEMPTS + 1):
        await time_passes(client)
        assert await res.embedding_worker.run_once() == 0
        assert (await statuses(client))["k3"] == (
            "failed" if attempt == MAX_ATTEMPTS else "pending",
            attempt,
        )
    got = (await client.get("/v1/robots/a/memories/k3")).json()
    assert got["embedding_status"] == "failed"
    stats = (await client.get("/v1/robots/a/stats")).json()["long_term"]
    assert (stats["pending_embeddings"], stats["failed_embeddings"]) == (0, 1)
    assert (await client.get("/v1/stats")).json()["failed_embeddings"] == 1
    # Failed is terminal: no more provider calls for it.
    stub.requests.clear()
    await time_passes(client)
    assert await res.embedding_worker.run_once() == 0
    assert stub.requests == []
    # New content makes it pending again.
    r = await client.put("/v1/robots/a/memories/k3", json={"content": "a fixed text"})
    assert r.json()["embedding_status"] == "ready"  # embedded at once: the provider accepts it


async def test_an_unreachable_provider_never_marks_memories_failed(
    client, stub: StubServer
) -> None:
    await add_pending(client, ["k0", "k1"])
    res = client.app.state.components
    for attempt in range(1, 3 * MAX_ATTEMPTS):
        await time_passes(client)
        assert await res.embedding_worker.run_once() == 0
        assert await statuses(client) == {"k0": ("pending", attempt), "k1": ("pending", attempt)}
    # Far more attempts than 2^n can count: the backoff stays at its cap, and the pass works.
    async with res.sessionmaker() as s, s.begin():
        await s.execute(text("UPDATE memory SET embedding_attempts = 5000"))
    await time_passes(client)
    assert await res.embedding_worker.run_once() == 0
    async with res.sessionmaker() as s:
        waits = (
            (
                await s.execute(
                    text(
                        "SELECT DISTINCT round(extract(epoch FROM embedding_next_at - now()))"
                        " FROM memory"
                    )
                )
            )
            .scalars()
            .all()
        )
    assert waits == [300]
    stub.reply = healthy_except("never")
    await time_passes(client)
    assert await res.embedding_worker.run_once() == 2
    assert await statuses(client) == {"k0": ("ready", 5001), "k1": ("ready", 5001)}


async def test_no_row_lock_is_held_across_the_provider_call(client, stub: StubServer) -> None:
    await add_pending(client, ["k"])
    stub.reply = healthy_except("never")
    stub.delay_s = 1.5
    res = client.app.state.components
    asked = len(stub.requests)  # the add's own attempt, refused
    worker = asyncio.create_task(res.embedding_worker.run_once())
    for _ in range(500):  # the stub records the request before it starts its delay
        if len(stub.requests) > asked:
            break
        await asyncio.sleep(0.01)
    # The provider is answering the worker; a replace of the row takes its lock at once.
    started = asyncio.get_running_loop().time()
    r = await client.put(
        "/v1/robots/a/memories/k", json={"content": "replaced", "embedding": one_hot(9)}
    )
    assert r.status_code == 200
    assert asyncio.get_running_loop().time() - started < 1.0
    # The worker's vector was for the old content: it is not stored over the client's.
    assert await worker == 1
    got = (await client.get("/v1/robots/a/memories/k")).json()
    assert (got["content"], got["embedding_status"], got["embedding_model"]) == (
        "replaced",
        "ready",
        "client",
    )
