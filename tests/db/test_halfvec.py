"""Embeddings stored as halfvec (HTM_VECTOR_STORAGE=halfvec at migration time, 0005): the
service detects the column's type and every statement casts to it; data survives the
migration both ways."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import downgrade, upgrade
from app.db.sql import vector_text
from app.recall import statements as q

DIM = 384
# Cosine distance to QUERY (e0) grows with the e1 component: a, b, c, d, e in that order.
SLOPES = {"a": 0.1, "b": 0.3, "c": 0.6, "d": 1.0, "e": 2.0}


def vec(e0: float, e1: float = 0.0, e2: float = 0.0) -> list[float]:
    v = [0.0] * DIM
    v[0], v[1], v[2] = e0, e1, e2
    return v


QUERY = vec(1.0)


def memory_vector(key: str) -> list[float]:
    # 0.1 and 0.3 are not half-precision numbers: they round on the way in.
    return vec(1.0, SLOPES[key], 0.123456789)


def as_half(v: list[float]) -> list[float]:
    return [float(x) for x in np.asarray(v, dtype=np.float32).astype(np.float16)]


def migrate(
    url: str, storage: str, monkeypatch: pytest.MonkeyPatch, revision: str = "head"
) -> None:
    from app.config import get_settings

    monkeypatch.setenv("HTM_VECTOR_STORAGE", storage)
    get_settings.cache_clear()
    try:
        upgrade(url, revision)
    finally:
        monkeypatch.delenv("HTM_VECTOR_STORAGE")
        get_settings.cache_clear()


async def fetch(url: str, *statements: str, **params: object) -> list[tuple]:
    """The last statement's rows, all run in one transaction (rolled back)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            for sql in statements:
                rows = [tuple(r) for r in (await conn.execute(text(sql), params)).all()]
            return rows
    finally:
        await engine.dispose()


async def column_and_index(url: str) -> tuple[str, str]:
    [(column, index)] = await fetch(
        url,
        """SELECT format_type(atttypid, atttypmod),
                  (SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw')
           FROM pg_attribute WHERE attrelid = 'memory'::regclass AND attname = 'embedding'""",
    )
    return column, index


async def stored(url: str) -> dict[str, list[float]]:
    rows = await fetch(url, "SELECT key, CAST(CAST(embedding AS vector) AS text) FROM memory")
    return {k: [float(np.float32(x)) for x in v.strip("[]").split(",")] for k, v in rows}


@pytest.fixture
async def halfvec_url(database_factory, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    url = await database_factory()
    await asyncio.to_thread(migrate, url, "halfvec", monkeypatch)
    return url


@pytest.fixture
async def client(app_factory, halfvec_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # Equal-weight RRF, so the hybrid orders below follow from the ranks alone.
    async with app_factory(
        database_url=halfvec_url, recall_fusion="rrf", recall_vector_weight=1,
        recall_fulltext_weight=1,
    ) as c:  # fmt: skip
        c.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        yield c


async def add_set(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/robots/r/memories/batch",
        json={
            "memories": [
                {
                    "key": k,
                    "content": f"note {k} about zebras" if k == "e" else f"note {k}",
                    "embedding": memory_vector(k),
                }
                for k in SLOPES
            ]
        },
    )
    assert r.status_code == 201, r.text
    assert {m["embedding_status"] for m in r.json()["memories"]} == {"ready"}


async def recall(client: httpx.AsyncClient, strategy: str, query: str = "anything") -> list[str]:
    r = await client.post(
        "/v1/robots/r/recall",
        json={"query": query, "strategy": strategy, "embedding": QUERY, "limit": 5},
    )
    assert r.status_code == 200, r.text
    return [h["key"] for h in r.json()["hits"]]


async def test_the_migration_stores_and_indexes_halfvec(halfvec_url: str) -> None:
    column, index = await column_and_index(halfvec_url)
    assert column == f"halfvec({DIM})"
    assert "USING hnsw (embedding halfvec_cosine_ops) WITH (m='16', ef_construction='64')" in index
    # The counting triggers of 0004 were re-created after the type change.
    triggers = await fetch(
        halfvec_url,
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'memory'::regclass AND NOT tgisinternal",
    )
    assert {"memory_count_old", "memory_count_new"} <= {t for (t,) in triggers}


async def test_client_vectors_round_trip_within_half_precision(client, halfvec_url) -> None:
    await add_set(client)
    r = await client.put(
        "/v1/robots/r/memories/b",
        json={"content": "note b, replaced", "embedding": vec(1.0, 0.35, 0.987654321)},
    )
    assert r.status_code == 200, r.text
    got = await stored(halfvec_url)
    assert got == {k: as_half(memory_vector(k)) for k in "acde"} | {
        "b": as_half(vec(1.0, 0.35, 0.987654321))
    }
    assert got["a"][1] != 0.1 and abs(got["a"][1] - 0.1) < 0.1 * 2**-11


async def test_vector_and_hybrid_recall_rank_exactly_on_both_paths(client) -> None:
    await add_set(client)
    assert client.app.state.components.vectors._read.get(None) == "halfvec"
    # Five memories: exact search.
    assert await recall(client, "vector") == ["a", "b", "c", "d", "e"]
    # The text side ranks only "e" (zebras): RRF puts it first, then the vector order.
    assert await recall(client, "hybrid", "zebras") == ["e", "a", "b", "c", "d"]
    # Known as too large for exact search: the HNSW statements.
    ns = client.headers["X-Namespace"]
    [(ns_id,)] = await _session_rows(client, "SELECT id FROM namespace WHERE name = :n", n=ns)
    client.app.state.components.search_caches.large_namespaces.add(ns_id)
    assert await recall(client, "vector") == ["a", "b", "c", "d", "e"]
    assert await recall(client, "hybrid", "zebras") == ["e", "a", "b", "c", "d"]


async def _session_rows(client: httpx.AsyncClient, sql: str, **params: object) -> list:
    async with client.app.state.components.sessionmaker() as s:
        return [tuple(r) for r in (await s.execute(text(sql), params)).all()]


async def test_the_hnsw_index_serves_the_halfvec_query(client) -> None:
    await add_set(client)

    nearest = f"SELECT id FROM memory ORDER BY embedding <=> {q.qvec('halfvec')} LIMIT 5"
    async with client.app.state.components.sessionmaker() as s:
        await s.execute(text("SET LOCAL enable_seqscan = off"))
        rows = await s.execute(text(f"EXPLAIN {nearest}"), {"qvec": vector_text(QUERY)})
        plan = "\n".join(r[0] for r in rows.all())
    # On a TimescaleDB hypertable the index is the chunk's copy, named with its prefix.
    assert re.search(r"Index Scan using (_hyper_\d+_\d+_chunk_)?memory_embedding_hnsw ", plan), plan


async def test_a_vector_beyond_half_precision_is_a_422_and_writes_nothing(client) -> None:
    r = await client.post(
        "/v1/robots/r/memories", json={"key": "big", "content": "x", "embedding": vec(70000.0)}
    )
    assert r.status_code == 422, r.text
    assert "65504" in r.text
    r = await client.post(
        "/v1/robots/r/memories", json={"key": "tiny", "content": "x", "embedding": vec(1e-9)}
    )
    assert r.status_code == 422, r.text
    r = await client.post(
        "/v1/robots/r/recall", json={"query": "x", "strategy": "vector", "embedding": vec(1e6)}
    )
    assert r.status_code == 422, r.text
    # Nothing was written: not the robot, not a memory of the namespace.
    assert (await client.get("/v1/robots/r")).status_code == 404
    r = await client.get("/v1/robots/r/memories")  # the namespace's memories (scope=all)
    assert (r.status_code, r.json()["items"]) == (200, [])


async def test_migrating_between_vector_and_halfvec_keeps_the_data(
    database_factory, app_factory, monkeypatch
) -> None:
    url = await database_factory()
    ns = f"t-{uuid.uuid4().hex[:12]}"  # Redis is shared with the other tests
    await asyncio.to_thread(migrate, url, "vector", monkeypatch)
    assert (await column_and_index(url))[0] == f"vector({DIM})"
    async with app_factory(database_url=url) as c:
        c.headers["X-Namespace"] = ns
        await add_set(c)
    full = await stored(url)
    assert full == {k: [float(np.float32(x)) for x in memory_vector(k)] for k in SLOPES}

    # Back to 0004 (vector), then up with halfvec: the values round to half precision.
    await asyncio.to_thread(downgrade, url, "0004")
    await asyncio.to_thread(migrate, url, "halfvec", monkeypatch)
    assert (await column_and_index(url))[0] == f"halfvec({DIM})"
    half = await stored(url)
    assert half == {k: as_half(v) for k, v in full.items()}
    async with app_factory(database_url=url) as c:
        c.headers["X-Namespace"] = ns
        assert await recall(c, "vector") == ["a", "b", "c", "d", "e"]
        r = await c.get("/v1/stats")
        assert r.status_code == 200, r.text

    # Down again: vector, holding exactly the half-precision values.
    await asyncio.to_thread(downgrade, url, "0004")
    column, index = await column_and_index(url)
    assert column == f"vector({DIM})"
    assert "vector_cosine_ops" in index
    assert await stored(url) == half
    # The counters were rebuilt with the new sizes: they equal a recount.
    counted = await fetch(url, "SELECT sum(bytes) FROM namespace_memory_count")
    recounted = await fetch(
        url, "SELECT memory_count_rebuild()", "SELECT sum(bytes) FROM namespace_memory_count"
    )
    assert counted == recounted


async def test_auto_storage_is_halfvec_when_new_and_leaves_a_filled_table_as_it_is(
    database_factory, app_factory, monkeypatch
) -> None:
    # A new database: halfvec (the embedded server's pgvector 0.8.5 has it).
    url = await database_factory()
    await asyncio.to_thread(migrate, url, "auto", monkeypatch)
    assert (await column_and_index(url))[0] == f"halfvec({DIM})"

    # A database of the days before 0005 with memories in it: upgraded with `auto`, its
    # column stays vector (no table rewrite unasked), and it serves as before.
    url = await database_factory()
    await asyncio.to_thread(migrate, url, "vector", monkeypatch, "0004")
    ns = f"t-{uuid.uuid4().hex[:12]}"
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO namespace (name) VALUES (:ns)"), {"ns": ns})
            await conn.execute(
                text("""
                INSERT INTO robot (namespace_id, name) SELECT id, 'r' FROM namespace
                WHERE name = :ns"""),
                {"ns": ns},
            )
            # Nearer to QUERY than every memory of the set (its e1 is the smallest).
            await conn.execute(
                text("""
                INSERT INTO memory (namespace_id, key, content, author_robot_id, token_count,
                                    embedding, embedding_status)
                SELECT n.id, 'old', 'from before 0005', r.id, 4, CAST(:v AS vector), 'ready'
                FROM namespace n JOIN robot r ON r.namespace_id = n.id WHERE n.name = :ns"""),
                {"ns": ns, "v": vector_text(vec(1.0, 0.05))},
            )
    finally:
        await engine.dispose()
    await asyncio.to_thread(migrate, url, "auto", monkeypatch)
    assert await column_and_index(url) == (
        f"vector({DIM})",
        "CREATE INDEX memory_embedding_hnsw ON public.memory USING hnsw (embedding "
        "vector_cosine_ops) WITH (m='16', ef_construction='64')",
    )
    async with app_factory(database_url=url) as c:
        c.headers["X-Namespace"] = ns
        await add_set(c)
        assert await recall(c, "vector") == ["old", "a", "b", "c", "d"]
