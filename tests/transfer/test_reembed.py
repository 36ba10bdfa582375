"""`htm reembed`: after a change of model, the namespace's memories embedded by another
model are embedded again through the embedding worker, a batch at a time; recall keeps
answering meanwhile (a memory waiting is out of vector search, still in full text); stopped
half way, running it again finishes; a failing provider stops it with the rows pending.
Each test has a database of its own: the embedding worker serves every namespace."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.transfer.reembed import Stalled, _counts, reembed
from tests.stubs import Recorded, StubServer
from tests.transfer.conftest import Htm
from tests.vectors import as_stored

DIM = 384


def vector(model: str, content: str) -> list[float]:
    rng = random.Random(f"{model}:{content}")
    v = [rng.gauss(0, 1) for _ in range(DIM)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def provider(req: Recorded) -> tuple[int, dict[str, Any]]:
    texts, model = req.body["input"], req.body["model"]
    return 200, {"data": [{"index": i, "embedding": vector(model, t)} for i, t in enumerate(texts)]}


Apps = Callable[[str], AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
async def apps(app_factory, database_factory, stub: StubServer) -> AsyncIterator[Apps]:  # type: ignore[no-untyped-def]
    """`apps(model)`: an app on this test's database whose provider is `model`."""
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    stub.reply = provider

    def app(model: str) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        return app_factory(  # type: ignore[no-any-return]
            database_url=url,
            embedding_provider="openai",
            embedding_model=model,
            embedding_url=stub.url,
            embedding_timeout_s=2,
            embedding_worker_interval_s=3600,  # the tests run each pass themselves
        )

    yield app


NOTES = {f"n{i}": f"note number {i} about the harbour" for i in range(5)}


async def seed(client: httpx.AsyncClient, ns: str) -> None:
    client.headers["X-Namespace"] = ns
    memories = [{"key": k, "content": c} for k, c in NOTES.items()]
    memories.append({"key": "given", "content": "a client's vector", "embedding": [1.0] * DIM})
    r = await client.post("/v1/robots/r/memories/batch", json={"memories": memories})
    assert r.status_code == 201, r.text


async def models(client: httpx.AsyncClient) -> dict[str, tuple[str, str | None]]:
    items = (await client.get("/v1/robots/r/memories", params={"limit": 100})).json()["items"]
    return {m["key"]: (m["embedding_status"], m["embedding_model"]) for m in items}


async def stored(client: httpx.AsyncClient, key: str) -> list[float]:
    c = client.app.state.components  # type: ignore[attr-defined]
    async with c.sessionmaker() as s:
        row = (
            await s.execute(
                text("SELECT embedding::text AS e FROM memory WHERE key = :k"), {"k": key}
            )
        ).one()
    return [float(x) for x in row.e.strip("[]").split(",")]


async def test_reembed_embeds_every_memory_of_the_old_model_a_batch_at_a_time(
    apps: Apps, stub: StubServer
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    async with apps("model-a") as client:
        await seed(client, ns)
        assert set((await models(client)).values()) == {("ready", "model-a"), ("ready", "client")}
    async with apps("model-b") as client:
        client.headers["X-Namespace"] = ns
        stub.requests.clear()
        c = client.app.state.components  # type: ignore[attr-defined]

        done = await reembed(c, ns, batch=2)

        assert (done.embedded, done.failed) == (5, 0)
        assert await models(client) == {
            **{k: ("ready", "model-b") for k in NOTES},
            "given": ("ready", "client"),  # a client's vector is the client's to change
        }
        # At most a batch is pending at a time, whichever worker takes it (the app's own
        # background pass may), and each memory is embedded once.
        sizes = [len(r.body["input"]) for r in stub.requests]
        assert max(sizes) == 2 and sum(sizes) == 5
        got = await stored(client, "n3")
        assert got == pytest.approx(list(as_stored(vector("model-b", NOTES["n3"]))), rel=1e-6)
        assert await reembed(c, ns, batch=2) == type(done)(embedded=0, failed=0)  # nothing left


async def test_recall_skips_a_memory_waiting_for_its_new_vector_and_a_rerun_finishes(
    apps: Apps, stub: StubServer
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    async with apps("model-a") as client:
        await seed(client, ns)
    async with apps("model-b") as client:
        # The provider refuses the notes for now (the app's background worker may try them)
        # but answers questions, so vector recall runs while they wait.
        stub.reply = lambda req: (
            (503, {"error": "busy"}) if "note" in req.body["input"][0] else provider(req)
        )
        client.headers["X-Namespace"] = ns
        c = client.app.state.components  # type: ignore[attr-defined]
        async with c.sessionmaker() as s:
            ns_id = (
                await s.execute(text("SELECT id FROM namespace WHERE name = :n"), {"n": ns})
            ).scalar()
        # A run stopped right after taking its first batch (n0, n1) out.
        assert await _counts(c, ns_id, "model-b", 2) == (5, 0)

        def keys(r: httpx.Response) -> set[str]:
            assert r.status_code == 200, r.text
            return {h["key"] for h in r.json()["hits"]}

        ask = {"query": "harbour", "limit": 10, "load_into_working_memory": False, "min_score": 0}
        # The question's vector is given: the app's worker may be batching refused notes with
        # it through the provider at this moment (the micro-batcher shares one call).
        vector_hits = await client.post(
            "/v1/robots/r/recall",
            json={**ask, "strategy": "vector", "embedding": vector("model-b", "harbour")},
        )
        assert keys(vector_hits) == {"n2", "n3", "n4", "given"}
        text_hits = await client.post("/v1/robots/r/recall", json={**ask, "strategy": "fulltext"})
        assert keys(text_hits) == set(NOTES)

        stub.reply = provider
        assert (await reembed(c, ns, batch=2)).embedded == 5
        assert {v for k, v in (await models(client)).items() if k != "given"} == {
            ("ready", "model-b")
        }
        vector_hits = await client.post("/v1/robots/r/recall", json={**ask, "strategy": "vector"})
        assert keys(vector_hits) == {*NOTES, "given"}


async def test_a_failing_provider_stops_reembed_with_the_rows_pending(
    apps: Apps, stub: StubServer
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    async with apps("model-a") as client:
        await seed(client, ns)
    async with apps("model-b") as client:
        client.headers["X-Namespace"] = ns
        stub.reply = lambda _req: (503, {"error": "overloaded"})
        c = client.app.state.components  # type: ignore[attr-defined]
        with pytest.raises(Stalled, match=r"5 memories of namespace .* wait for an embedding"):
            await reembed(c, ns, batch=10, stall_s=0.5)
        assert await models(client) == {
            **{k: ("pending", "model-a") for k in NOTES},
            "given": ("ready", "client"),
        }


def test_reembed_without_a_model_says_so(htm: Htm) -> None:
    run = htm("reembed", "--namespace", "default")
    assert run.returncode == 2
    assert "htm reembed: no embedding model to re-embed with: HTM_EMBEDDING_PROVIDER is none" in (
        run.stderr
    )
