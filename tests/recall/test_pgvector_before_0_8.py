"""Search as it runs on pgvector < 0.8 (no iterative index scans), forced on a server that has
them: SearchCaches(pgvector=PgvectorVersions(forced=…)) takes the old path, where a
filtered HNSW scan comes back short and the exact query must fill the page. Users' servers
may be that old; the embedded one (pgvector 0.8.5) would otherwise never run this path.

Own database, 6,000 memories: one robot wrote 2,500 of them, more than the exact-search
shortcut takes (EXACT_SEARCH_MAX_ROWS), so the index runs, and few enough that the walk's
ef_search candidates hold fewer of that robot's memories than the page needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from pgvector.asyncpg import register_vector
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.session import DbSession
from app.db.sql import compiled
from app.recall.caches import PgvectorVersions, SearchCaches
from app.recall.planner import EXACT_SEARCH_MAX_ROWS
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from tests.recall.test_search import T0, engine_for, nearest, raw_connect, unit

N, AUTHORED, EF_SEARCH, LIMIT = 6_000, 2_500, 20, 20
OLD = (0, 6, 2)  # what `pgserver` 0.1.4 shipped
EXACT = "+ 0, m.id"  # the exact vector query's ORDER BY (statements.nearest)


@dataclass
class Set:
    engine: AsyncEngine
    namespace_id: int
    author_id: int
    ids: np.ndarray
    vectors: np.ndarray
    authored: np.ndarray


@pytest.fixture(scope="module")
async def memories(database_factory) -> AsyncIterator[Set]:  # type: ignore[no-untyped-def]
    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    conn = await raw_connect(url)
    try:
        await register_vector(conn)
        dim = await conn.fetchval(
            "SELECT atttypmod FROM pg_attribute "
            "WHERE attrelid = 'memory'::regclass AND attname = 'embedding'"
        )
        rng = np.random.default_rng(20261123)
        vectors = unit(rng, N, dim)
        authored = np.sort(rng.choice(N, size=AUTHORED, replace=False))
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('old') RETURNING id")
        bulk, author = [
            await conn.fetchval(
                "INSERT INTO robot (namespace_id, name) VALUES ($1, $2) RETURNING id", ns, name
            )
            for name in ("bulk", "alice")
        ]
        ids = np.arange(1, N + 1)
        is_authored = np.zeros(N, dtype=bool)
        is_authored[authored] = True
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'"
        )
        await conn.execute("DROP INDEX memory_embedding_hnsw")
        await conn.copy_records_to_table(
            "memory",
            records=[
                (int(ids[i]), T0, ns, f"m{i}", f"memory number {i}", "fact", 1.0, [], "{}",
                 author if is_authored[i] else bulk, 3, vectors[i], "ready")
                for i in range(N)
            ],
            columns=["id", "created_at", "namespace_id", "key", "content", "type", "importance",
                     "tags", "metadata", "author_robot_id", "token_count", "embedding",
                     "embedding_status"],
        )  # fmt: skip
        await conn.execute(index)
        await conn.execute("VACUUM ANALYZE memory")
    finally:
        await conn.close()
    engine = engine_for(url)
    yield Set(engine, ns, author, ids, vectors, authored)
    await engine.dispose()


class Recording:
    """The session a repository is given, noting each statement and its parameters."""

    def __init__(self, session: DbSession) -> None:
        self.session = session
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, clause: Any, params: Any = None) -> Any:
        self.sent.append((compiled(clause)[0], dict(params or {})))
        return await self.session.execute(clause, params)

    def settings(self) -> list[list[str]]:
        """The pgvector settings each statement set, in order."""
        return [p["set_names"] for _, p in self.sent if "set_names" in p]

    def exact_queries(self) -> int:
        return sum(EXACT in s for s, _ in self.sent)


@pytest.fixture
async def session(memories: Set) -> AsyncIterator[Recording]:
    async with DbSession(memories.engine) as s:
        yield Recording(s)
        await s.rollback()


def _query(memories: Set, seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed), 1, memories.vectors.shape[1])[0]


def _expected(memories: Set, q: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    a = memories.authored
    return nearest(q, memories.vectors[a], memories.ids[a], k)


async def test_forced_pre_0_8_vector_search_falls_back_to_the_exact_nearest(
    memories: Set, session: Recording
) -> None:
    assert AUTHORED > EXACT_SEARCH_MAX_ROWS  # else the exact shortcut answers, not the index
    q = _query(memories, 1)
    expected_ids, expected_sims = _expected(memories, q, LIMIT)
    repo = Search(session, EF_SEARCH, caches=SearchCaches(pgvector=PgvectorVersions(forced=OLD)))  # type: ignore[arg-type]

    hits = await repo.vector(
        SearchQuery(
            memories.namespace_id,
            LIMIT,
            SearchFilters(author_robot_id=memories.author_id),
            vector=q.tolist(),
        )
    )

    assert [h.id for h in hits] == expected_ids
    assert [h.vector_similarity for h in hits] == pytest.approx(expected_sims, abs=1e-5)
    assert [h.vector_rank for h in hits] == list(range(1, LIMIT + 1))
    # The index statement set ef_search only (no iterative scan), came back short, and the
    # exact query filled the page.
    assert session.settings() == [["hnsw.ef_search"]]
    assert session.exact_queries() == 1


async def test_forced_pre_0_8_hybrid_search_falls_back_to_the_exact_vector_ranking(
    memories: Set, session: Recording
) -> None:
    q = _query(memories, 2)
    expected_ids, _ = _expected(memories, q, LIMIT)
    repo = Search(session, EF_SEARCH, caches=SearchCaches(pgvector=PgvectorVersions(forced=OLD)))  # type: ignore[arg-type]

    # No memory holds "xylophone": the fusion is the vector ranking alone.
    hits = await repo.hybrid(
        SearchQuery(
            memories.namespace_id,
            LIMIT,
            SearchFilters(author_robot_id=memories.author_id),
            text="xylophone",
            vector=q.tolist(),
        ),
    )

    assert [h.id for h in hits] == expected_ids
    assert [h.score for h in hits] == [1 / (60 + r) for r in range(1, LIMIT + 1)]
    assert session.settings() == [["hnsw.ef_search"]]
    assert session.exact_queries() == 1


async def test_the_installed_pgvector_fills_the_same_page_with_an_iterative_scan(
    memories: Set, session: Recording
) -> None:
    """The other side of the two tests above: with pgvector >= 0.8 the index scan walks on
    and the page is full without the exact query (so only forcing runs the old path)."""
    repo = Search(session, EF_SEARCH)  # type: ignore[arg-type]
    if await repo.repository.pgvector_version() < (0, 8, 0):
        pytest.skip("the server's pgvector has no iterative scans")
    q = _query(memories, 1)

    hits = await repo.vector(
        SearchQuery(
            memories.namespace_id,
            LIMIT,
            SearchFilters(author_robot_id=memories.author_id),
            vector=q.tolist(),
        )
    )

    assert len(hits) == LIMIT
    assert {h.author for h in hits} == {"alice"}
    assert session.settings() == [["hnsw.ef_search", "hnsw.iterative_scan", "hnsw.max_scan_tuples"]]
    assert session.exact_queries() == 0
