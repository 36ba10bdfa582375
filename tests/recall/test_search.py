"""The long-term search repository against real PostgreSQL + pgvector: exact sets, exact orders.

The 20,000-memory set lives in its own database, built once for the module; the small,
hand-built sets live in per-test namespaces of the shared database and are rolled back.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.session import DbSession
from app.db.sql import compiled, vector_text
from app.recall import planner as recall_planner
from app.recall.caches import LargeNamespaces, LexemeStats, PgvectorVersions, SearchCaches
from app.recall.fusion import Fusion, hybrid_candidates
from app.recall.hits import SearchHit, hits_of
from app.recall.planner import (
    FULLTEXT_FILL_WINDOW,
    MAX_QUERY_LEXEMES,
    Route,
    TextList,
    TextPlan,
    hnsw_settings,
)
from app.recall.query import SearchFilters, SearchQuery, where
from app.recall.search import Search
from app.recall.statements import nearest as nearest_sql
from app.recall.statements import render, text_ctes, text_params
from tests.vectors import as_stored, similarity

T0 = datetime(2025, 1, 1, tzinfo=UTC)
BIG = 20_000
AUTHORED = 50
SPACING = timedelta(days=365) / BIG  # 1576.8 s: the big set spans exactly one year
WEEK = (T0 + timedelta(days=200), T0 + timedelta(days=207))

# ts_rank with the default weights: each query lexeme found once in a memory adds
# 0.1 (weight D) / (π²/6), and the sum is divided by the number of query lexemes.
ONE_TERM = 0.1 / 1.64493406685


def engine_for(url: str) -> AsyncEngine:
    return create_async_engine(url, connect_args={"server_settings": {"jit": "off"}})


async def raw_connect(url: str) -> asyncpg.Connection:
    u = make_url(url)
    return await asyncpg.connect(
        user=u.username, password=u.password, host=u.query.get("host") or u.host,
        port=u.port, database=u.database,
    )  # fmt: skip


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def nearest(q: np.ndarray, vectors: np.ndarray, ids: np.ndarray, k: int) -> tuple[list, list]:
    """Exact cosine ranking in float64 of the vectors as stored: (ids, similarities) of the k
    nearest."""
    m, q = as_stored(vectors), as_stored(q)
    sims = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    order = np.argsort(-sims, kind="stable")[:k]
    # The expected order must not hinge on float32 rounding inside pgvector.
    assert np.min(-np.diff(sims[np.argsort(-sims)][: k + 1])) > 1e-5
    return [int(i) for i in ids[order]], [float(s) for s in sims[order]]


async def force_hnsw(session: DbSession) -> None:
    """Make sorting prohibitively expensive, so distance order can only come from HNSW."""
    await session.execute(text("SET LOCAL enable_sort = off"))


# --- the 20,000-memory set ---------------------------------------------------------------


@dataclass
class BigSet:
    engine: AsyncEngine
    namespace_id: int
    author_id: int
    ids: np.ndarray
    vectors: np.ndarray
    created_at: list[datetime]
    authored: np.ndarray  # positions of the author's memories


@pytest.fixture(scope="module")
async def big(database_factory) -> AsyncIterator[BigSet]:  # type: ignore[no-untyped-def]
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
        rng = np.random.default_rng(20261121)
        vectors = unit(rng, BIG, dim)
        authored = np.sort(rng.choice(BIG, size=AUTHORED, replace=False))
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('big') RETURNING id")
        bulk = await conn.fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'bulk') RETURNING id", ns
        )
        author = await conn.fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'alice') RETURNING id", ns
        )
        ids = np.array(
            await conn.fetchval(
                "SELECT array_agg(nextval('memory_id_seq')) FROM generate_series(1, $1)", BIG
            )
        )
        created = [T0 + i * SPACING for i in range(BIG)]
        is_authored = np.zeros(BIG, dtype=bool)
        is_authored[authored] = True
        records = [
            (int(ids[i]), created[i], ns, f"m{i}", f"memory number {i}", "fact", 1.0, [], "{}",
             author if is_authored[i] else bulk, 3, vectors[i], "ready")
            for i in range(BIG)
        ]  # fmt: skip
        # Building the HNSW graph once after COPY is ~10x faster than growing it row by row;
        # it is rebuilt exactly as the migration defines it.
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'"
        )
        await conn.execute("DROP INDEX memory_embedding_hnsw")
        await conn.copy_records_to_table(
            "memory",
            records=records,
            columns=["id", "created_at", "namespace_id", "key", "content", "type", "importance",
                     "tags", "metadata", "author_robot_id", "token_count", "embedding",
                     "embedding_status"],
        )  # fmt: skip
        await conn.execute("SET maintenance_work_mem = '256MB'")
        await conn.execute(index)
        await conn.execute("VACUUM ANALYZE memory")
    finally:
        await conn.close()
    engine = engine_for(url)
    yield BigSet(engine, ns, author, ids, vectors, created, authored)
    await engine.dispose()


@pytest.fixture
async def big_session(big: BigSet) -> AsyncIterator[DbSession]:
    async with DbSession(big.engine) as session:
        yield session
        await session.rollback()


class Recording:
    """The session a repository is given, noting each statement it sends (as the driver gets it)."""

    def __init__(self, session: DbSession) -> None:
        self.session = session
        self.statements: list[str] = []

    async def execute(self, clause: Any, params: Any = None) -> Any:
        self.statements.append(compiled(clause)[0])
        return await self.session.execute(clause, params)


async def index_only(
    search: Search, query: SearchQuery, settings: dict[str, str] | None = None
) -> list[SearchHit]:
    """The index statement of a vector search alone (no fallback to exact search), with
    `settings` (none: pgvector's defaults)."""
    plan = await search.plan(query, "vector")
    assert plan is not None and plan.vector is not None
    vector = replace(plan.vector, route=Route(count=False, exact=False), index=settings or {})
    rows, _ = await search.repository.run(render(replace(plan, vector=vector))[:1])
    return hits_of(plan, rows)


async def words_of(search: Search, query: SearchQuery) -> TextPlan | None:
    """Which words select and rank a full-text search's candidates (planner.split_lexemes)."""
    plan = await search.plan(query, "fulltext")
    return plan.text.words if plan is not None and plan.text is not None else None


def query_vector(big: BigSet, seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed), 1, big.vectors.shape[1])[0]


# planner-choice: as the service runs; forced-hnsw: the index path even where the planner
# would not take it; index-first: no small-set shortcut and no choosing exact search by cost
# either, and searching as pgvector < 0.8 does, so only the fallback from a short index page
# to exact search can make the answer right. (pgvector >= 0.8's iterative scan fills that
# page itself, approximately: for 50 of 20,000 memories its top 20 is not the exact one.)
PLANNERS = ["planner-choice", "forced-hnsw", "index-first"]
PRE_ITERATIVE_SCANS = (0, 7, 4)


async def use_planner(planner: str, session: DbSession, monkeypatch) -> None:
    if planner != "planner-choice":
        await force_hnsw(session)
    if planner == "index-first":
        monkeypatch.setattr(recall_planner, "exact_is_cheaper", lambda *_, **__: False)


@pytest.mark.parametrize("planner", PLANNERS)
async def test_vector_author_filter_returns_the_exact_nearest_of_that_robots_memories(
    big: BigSet, big_session: DbSession, planner: str, monkeypatch
) -> None:
    await use_planner(planner, big_session, monkeypatch)
    q = query_vector(big, 1)
    expected_ids, expected_sims = nearest(q, big.vectors[big.authored], big.ids[big.authored], 20)

    version = PRE_ITERATIVE_SCANS if planner == "index-first" else None
    search = Search(big_session, caches=SearchCaches(pgvector=PgvectorVersions(forced=version)))
    if planner == "index-first":
        search.bounds.exact_max_rows = 0
    hits = await search.vector(
        SearchQuery(
            big.namespace_id, 20, SearchFilters(author_robot_id=big.author_id), vector=q.tolist()
        )
    )

    assert [h.id for h in hits] == expected_ids
    assert [h.vector_rank for h in hits] == list(range(1, 21))
    assert [h.vector_similarity for h in hits] == pytest.approx(expected_sims, abs=1e-5)
    assert [h.score for h in hits] == [h.vector_similarity for h in hits]
    assert {h.author for h in hits} == {"alice"}
    assert {h.fulltext_rank for h in hits} == {None}


# Not index-first: on TimescaleDB a week is one or two small chunks whose indexes fill the
# page approximately; the small-set shortcut is what makes this exact there.
@pytest.mark.parametrize("planner", PLANNERS[:2])
async def test_vector_week_filter_returns_the_exact_nearest_within_the_week(
    big: BigSet, big_session: DbSession, planner: str, monkeypatch
) -> None:
    await use_planner(planner, big_session, monkeypatch)
    q = query_vector(big, 2)
    in_week = np.array([WEEK[0] <= c < WEEK[1] for c in big.created_at])
    assert in_week.sum() == 384
    expected_ids, expected_sims = nearest(q, big.vectors[in_week], big.ids[in_week], 20)
    filters = SearchFilters(start=WEEK[0], end=WEEK[1])

    hits = await Search(big_session).vector(
        SearchQuery(big.namespace_id, 20, filters, vector=q.tolist())
    )

    assert [h.id for h in hits] == expected_ids
    assert [h.vector_similarity for h in hits] == pytest.approx(expected_sims, abs=1e-5)
    week = {int(i) for i in big.ids[in_week]}
    assert {h.id for h in hits} <= week


async def test_plain_hnsw_post_filtering_alone_returns_a_short_page(
    big: BigSet, big_session: DbSession
) -> None:
    """Proves the two tests above can fail: without the fallback the page is short.

    One robot's memories (1% of the rows) starve the index scan on plain tables and on
    TimescaleDB alike (a week would not: there a week is one or two small chunks)."""
    await force_hnsw(big_session)
    q = query_vector(big, 2)
    filters = SearchFilters(author_robot_id=big.author_id)

    plain = await index_only(
        Search(big_session), SearchQuery(big.namespace_id, 20, filters, vector=q.tolist())
    )
    eligible = where(big.namespace_id, filters)
    params: dict[str, Any] = {"qvec": vector_text(q.tolist()), "vec_n": 20, **eligible.params}
    sql = nearest_sql(eligible.sql, False, "vector")
    plan = "\n".join((await big_session.execute(text("EXPLAIN " + sql), params)).scalars())

    assert "memory_embedding_hnsw" in plan
    # ef_search = 40 candidates, ~1% of them by that robot: a short page.
    assert len(plain) < 20


async def test_hybrid_vector_side_falls_back_to_exact_when_the_index_scan_runs_short(
    big: BigSet, big_session: DbSession
) -> None:
    await force_hnsw(big_session)
    q = query_vector(big, 2)
    in_week = np.array([WEEK[0] <= c < WEEK[1] for c in big.created_at])
    expected_ids, _ = nearest(q, big.vectors[in_week], big.ids[in_week], 20)
    filters = SearchFilters(start=WEEK[0], end=WEEK[1])

    # No memory contains "xylophone": the fusion is the vector ranking alone.
    hits = await Search(big_session).hybrid(
        SearchQuery(big.namespace_id, 20, filters, text="xylophone", vector=q.tolist())
    )

    assert [h.id for h in hits] == expected_ids
    assert [h.vector_rank for h in hits] == list(range(1, 21))
    assert [h.score for h in hits] == [1 / (60 + r) for r in range(1, 21)]


async def test_a_large_namespace_is_estimated_once_per_ttl_for_unfiltered_search(
    big: BigSet, big_session: DbSession
) -> None:
    now = [0.0]
    large = LargeNamespaces(ttl_s=60, clock=lambda: now[0])
    recorded = Recording(big_session)
    repo = Search(recorded, caches=SearchCaches(large_namespaces=large))  # type: ignore[arg-type]

    def looked() -> tuple[int, int]:
        """(estimates, counts) sent so far: an EXPLAIN of the filters, and an eligibility
        count (the index statement's settings subquery counts too: not it)."""
        explains = sum(s.startswith("EXPLAIN") for s in recorded.statements)
        counts = [
            s
            for s in recorded.statements
            if "LIMIT $" in s and "SELECT count(*)" in s and "set_config" not in s
        ]
        return explains, len(counts)

    q = query_vector(big, 7)
    first = await repo.vector(SearchQuery(big.namespace_id, 5, vector=q))
    # 20,000 estimated (more than COUNT_BELOW_ESTIMATE): no count, and the namespace is known.
    assert looked() == (1, 0) and big.namespace_id in large
    # Within the TTL nothing is looked up again; the answer is the same.
    assert keys(await repo.vector(SearchQuery(big.namespace_id, 5, vector=q))) == keys(first)
    assert looked() == (1, 0)
    # A filtered search always estimates (its set may be small), and never marks the
    # namespace: 50 memories by one robot are few, so they are counted, then searched exactly.
    by_author = SearchFilters(author_robot_id=big.author_id)
    await repo.vector(SearchQuery(big.namespace_id, 5, by_author, vector=q))
    assert looked() == (2, 1)
    assert sum("+ 0, m.id" in s for s in recorded.statements) == 0  # the count's pass answered
    now[0] = 61.0
    assert big.namespace_id not in large
    await repo.vector(SearchQuery(big.namespace_id, 5, vector=q))
    assert looked() == (3, 1) and big.namespace_id in large


@pytest.mark.parametrize(("filtered", "ef_inside"), [(False, "220"), (True, "40")])
async def test_hnsw_settings_are_local_to_the_transaction(
    big: BigSet, filtered: bool, ef_inside: str
) -> None:
    """The index path sets ef_search for its transaction only; a filter that leaves few rows
    is answered exactly without the index, so it sets nothing."""
    show = "SELECT current_setting('hnsw.ef_search')"
    filters = SearchFilters(author_robot_id=big.author_id) if filtered else SearchFilters()
    async with DbSession(big.engine) as session:
        await Search(session).vector(
            SearchQuery(big.namespace_id, 220, filters, vector=query_vector(big, 3).tolist())
        )
        inside = (await session.execute(text(show))).scalar()
        await session.rollback()
        after = (await session.execute(text(show))).scalar()  # the same connection
    assert (inside, after) == (ef_inside, "40")


@pytest.mark.parametrize("ef", [5, 12, 40])
async def test_the_index_statement_sets_ef_search_before_its_scan(
    big_session: DbSession, big: BigSet, ef: int
) -> None:
    """The index statement carries its own settings (no round trip before it). Without an
    iterative scan each HNSW index scan yields exactly ef_search rows (or its table's rows,
    when fewer), so the row count proves that the value was in effect when the scans
    started, not merely set by the end of the statement. A plain table has one index; a
    TimescaleDB hypertable one per chunk, where the planner may sort a small chunk instead:
    with sorts and sequential scans off every chunk is read through its HNSW index."""
    await big_session.execute(text("SET LOCAL enable_seqscan = off"))
    await big_session.execute(text("SET LOCAL enable_sort = off"))
    rows = await big_session.execute(
        text("SELECT count(*) FROM memory WHERE namespace_id = :ns GROUP BY tableoid"),
        {"ns": big.namespace_id},
    )
    per_table = rows.scalars().all()  # the table's rows, or each chunk's
    q = query_vector(big, 5).tolist()
    limit = 2000
    hits = await index_only(
        Search(big_session),
        SearchQuery(big.namespace_id, limit, vector=q),
        {"hnsw.ef_search": str(ef)},
    )
    # the default, 40, would give 40 per index scan
    assert len(hits) == min(limit, sum(min(ef, n) for n in per_table))
    similarities = [h.vector_similarity for h in hits]
    assert similarities == sorted(similarities, reverse=True)
    await big_session.rollback()


async def test_pgvector_version_is_the_installed_extension(big_session: DbSession) -> None:
    installed = (
        await big_session.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        )
    ).scalar_one()
    version = await Search(big_session).repository.pgvector_version()
    assert ".".join(map(str, version)) == installed


def test_hnsw_settings_use_iterative_scans_from_pgvector_0_8() -> None:
    assert hnsw_settings((0, 6, 2), 20) == {"hnsw.ef_search": "100"}
    assert hnsw_settings((0, 6, 2), 20, ef_search=40) == {"hnsw.ef_search": "40"}
    assert hnsw_settings((0, 7, 4), 300) == {"hnsw.ef_search": "300"}
    assert hnsw_settings((0, 6, 2), 5000) == {"hnsw.ef_search": "1000"}
    assert hnsw_settings((0, 8, 0), 100, ef_search=40) == {
        "hnsw.ef_search": "100",
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": "20000",
    }


def test_hybrid_candidates_are_k_plus_twice_the_limit() -> None:
    assert hybrid_candidates(10, Fusion(k=60)) == 80
    assert hybrid_candidates(20, Fusion(k=1)) == 41
    assert hybrid_candidates(600, Fusion(k=60)) == 1000
    assert hybrid_candidates(1000, Fusion(k=60)) == 1000
    # a depth asked for is taken, within [limit, ef_search's maximum]
    assert hybrid_candidates(10, Fusion(candidates=25)) == 25
    assert hybrid_candidates(10, Fusion(candidates=3)) == 10
    assert hybrid_candidates(10, Fusion(method="score", candidates=5000)) == 1000


# --- small, hand-built sets ----------------------------------------------------------------


@pytest.fixture(scope="module")
async def shared_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = engine_for(database_url)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="module")
async def dim(shared_engine: AsyncEngine) -> int:
    async with shared_engine.connect() as conn:
        return (
            await conn.execute(
                text(
                    "SELECT atttypmod FROM pg_attribute "
                    "WHERE attrelid = 'memory'::regclass AND attname = 'embedding'"
                )
            )
        ).scalar_one()


@pytest.fixture
async def session(shared_engine: AsyncEngine) -> AsyncIterator[DbSession]:
    """A transaction that is rolled back: nothing a test adds outlives it."""
    async with DbSession(shared_engine) as s:
        yield s
        await s.rollback()


class Seed:
    """Adds namespaces, robots and memories with plain SQL inside the test's transaction."""

    def __init__(self, session: DbSession, dim: int) -> None:
        self.session = session
        self.dim = dim
        self.ids: dict[str, int] = {}

    async def namespace(self) -> int:
        return (
            await self.session.execute(
                text("INSERT INTO namespace (name) VALUES (:n) RETURNING id"),
                {"n": f"search-{uuid.uuid4().hex[:12]}"},
            )
        ).scalar_one()

    async def robot(self, namespace_id: int, name: str) -> int:
        return (
            await self.session.execute(
                text("INSERT INTO robot (namespace_id, name) VALUES (:ns, :n) RETURNING id"),
                {"ns": namespace_id, "n": name},
            )
        ).scalar_one()

    def toward(self, similarity: float, axis: int) -> list[float]:
        """A unit vector whose cosine similarity to e0 is `similarity` (exactly as stored
        in float32; `toward_as_stored` gives it under halfvec)."""
        v = [0.0] * self.dim
        v[0] = similarity
        v[axis] = float(np.sqrt(1 - similarity**2))
        return v

    async def memory(
        self,
        namespace_id: int,
        author: int,
        key: str,
        content: str,
        *,
        created_at: datetime,
        embedding: list[float] | None = None,
        type: str = "fact",
        tags: list[str] | None = None,
        importance: float = 1.0,
        metadata: dict[str, Any] | None = None,
        deleted: bool = False,
    ) -> int:
        import json

        memory_id = (
            await self.session.execute(
                text("""
                    INSERT INTO memory (created_at, namespace_id, key, content, type, importance,
                                        tags, metadata, author_robot_id, token_count, embedding,
                                        embedding_status, deleted_at)
                    VALUES (:created_at, :ns, :key, :content, :type, :importance,
                            CAST(:tags AS text[]), CAST(:metadata AS jsonb), :author, 5,
                            CAST(CAST(:embedding AS real[]) AS vector),
                            CASE WHEN CAST(:embedding AS real[]) IS NULL
                                 THEN 'pending' ELSE 'ready' END,
                            CASE WHEN :deleted THEN now() END)
                    RETURNING id"""),
                {
                    "created_at": created_at,
                    "ns": namespace_id,
                    "key": key,
                    "content": content,
                    "type": type,
                    "importance": importance,
                    "tags": tags or [],
                    "metadata": json.dumps(metadata or {}),
                    "author": author,
                    "embedding": embedding,
                    "deleted": deleted,
                },
            )
        ).scalar_one()
        self.ids[key] = memory_id
        return memory_id


@pytest.fixture
def seed(session: DbSession, dim: int) -> Seed:
    return Seed(session, dim)


def keys(hits: list[SearchHit]) -> list[str]:
    return [h.key for h in hits]


def at(hours: int) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=hours)


# --- full text -----------------------------------------------------------------------------

QUESTION = "When did Caroline go to the support group?"  # lexemes: carolin go support group


@pytest.fixture
async def story(seed: Seed) -> int:
    """Memories sharing 3, 2, 1 or 0 of the question's content words, plus ones never found."""
    ns = await seed.namespace()
    mel = await seed.robot(ns, "melanie")
    e = seed.toward(0.5, 1)
    await seed.memory(ns, mel, "lgbtq", "Caroline went to the LGBTQ support group on Tuesday",
                      created_at=at(1), embedding=e)  # fmt: skip
    await seed.memory(ns, mel, "pottery", "Melanie's pottery group meets every week",
                      created_at=at(2), embedding=e)  # fmt: skip
    await seed.memory(ns, mel, "sunrise", "Caroline painted a sunrise last year",
                      created_at=at(3), embedding=e)  # fmt: skip
    await seed.memory(ns, mel, "helped", "The support group helped her a lot",
                      created_at=at(4), embedding=e)  # fmt: skip
    await seed.memory(ns, mel, "hiking", "We go hiking in the mountains",
                      created_at=at(5), embedding=e)  # fmt: skip
    await seed.memory(ns, mel, "unrelated", "Nothing here mentions any of those words",
                      created_at=at(6), embedding=e)  # fmt: skip
    # Not embedded yet: full-text search must still find it.
    await seed.memory(ns, mel, "parade", "Caroline and her support group planned a parade",
                      created_at=at(7))  # fmt: skip
    await seed.memory(ns, mel, "forgotten", "Caroline support group go go go",
                      created_at=at(8), embedding=e, deleted=True)  # fmt: skip
    other = await seed.namespace()
    stranger = await seed.robot(other, "stranger")
    await seed.memory(other, stranger, "elsewhere", "Caroline went to the support group",
                      created_at=at(9), embedding=e)  # fmt: skip
    return ns


async def test_fulltext_question_matches_any_content_word_ranked_by_words_shared(
    session: DbSession, story: int
) -> None:
    hits = await Search(session).fulltext(SearchQuery(story, 10, text=QUESTION))

    # 3 shared words (newest first), then 2, then 1 (newest first). "go" alone is enough.
    assert keys(hits) == ["parade", "lgbtq", "helped", "hiking", "sunrise", "pottery"]
    assert [h.fulltext_rank for h in hits] == [1, 2, 3, 4, 5, 6]
    shared = [3, 3, 2, 1, 1, 1]
    assert [h.fulltext_score for h in hits] == pytest.approx(
        [n * ONE_TERM / 4 for n in shared], rel=1e-6
    )
    assert [h.score for h in hits] == [h.fulltext_score for h in hits]
    assert {h.vector_rank for h in hits} == {None}
    assert hits[0].author == "melanie"


async def test_fulltext_finds_a_proper_noun_alone(session: DbSession, story: int) -> None:
    hits = await Search(session).fulltext(SearchQuery(story, 10, text="Caroline?"))
    assert keys(hits) == ["parade", "sunrise", "lgbtq"]


@pytest.mark.parametrize("question", ["Where was it and what did they do?", "???", ""])
async def test_fulltext_stop_words_only_returns_nothing(
    session: DbSession, story: int, question: str
) -> None:
    repo = Search(session)
    assert await repo.fulltext(SearchQuery(story, 10, text=question)) == []
    assert await repo.hybrid(SearchQuery(story, 10, text=question, vector=None)) == []


async def test_fulltext_uses_the_first_32_content_words(session: DbSession, story: int) -> None:
    assert MAX_QUERY_LEXEMES == 32
    repo = Search(session)
    filler = " ".join(f"filler{i}" for i in range(31))
    found = await repo.fulltext(SearchQuery(story, 10, text=f"{filler} Caroline"))
    assert keys(found) == ["parade", "sunrise", "lgbtq"]
    assert await repo.fulltext(SearchQuery(story, 10, text=f"{filler} extra Caroline")) == []


async def test_fulltext_respects_the_limit(session: DbSession, story: int) -> None:
    hits = await Search(session).fulltext(SearchQuery(story, 2, text=QUESTION))
    assert keys(hits) == ["parade", "lgbtq"]


async def test_fulltext_with_common_words_ranks_rare_word_matches_first(
    session: DbSession, seed: Seed
) -> None:
    """With a candidate budget of 4, "group" (8 matches) is common and "caroline" (2) rare;
    common-word matches are then looked for among the newest 4 memories only."""
    ns = await seed.namespace()
    bot = await seed.robot(ns, "bot")
    # Says "group" three times: the best "group" match, but the oldest.
    await seed.memory(ns, bot, "ggg", "group after group after group", created_at=at(-1))
    await seed.memory(ns, bot, "c-only", "Caroline painted", created_at=at(0))
    await seed.memory(ns, bot, "c-and-g", "Caroline joined the group", created_at=at(1))
    for i in range(2, 8):
        await seed.memory(ns, bot, f"g{i}", f"The group met, take {i}", created_at=at(i))
    repo = Search(session)

    # Unbounded (the budget holds every match): plain ts_rank order.
    assert keys(await repo.fulltext(SearchQuery(ns, 4, text="Caroline group"))) == [
        "c-and-g", "ggg", "g7", "g6",
    ]  # fmt: skip
    assert keys(await repo.fulltext(SearchQuery(ns, 4, text="group"))) == [
        "ggg", "g7", "g6", "g5",
    ]  # fmt: skip

    repo.bounds.candidate_budget = 4
    repo.bounds.fill_window = 4
    # The rare word fills the page, so "group"-only memories are not even read.
    assert keys(await repo.fulltext(SearchQuery(ns, 2, text="Caroline group"))) == [
        "c-and-g", "c-only",
    ]  # fmt: skip
    # A page the rare word cannot fill takes the "group"-only memories among the newest 4:
    # "ggg" is older than those and is never ranked. That is the documented trade-off.
    assert keys(await repo.fulltext(SearchQuery(ns, 4, text="Caroline group"))) == [
        "c-and-g", "g7", "g6", "g5",
    ]  # fmt: skip
    assert keys(await repo.fulltext(SearchQuery(ns, 4, text="group"))) == [
        "g7", "g6", "g5", "g4",
    ]  # fmt: skip
    # The window counts memories, not matches: a newer memory without the word takes a place
    # in it, so the page is short although older memories say "group".
    await seed.memory(ns, bot, "newest", "Nothing to see", created_at=at(8))
    assert keys(await repo.fulltext(SearchQuery(ns, 4, text="group"))) == [
        "g7",
        "g6",
        "g5",
    ]
    # Filters apply before the window: the newest 4 memories of the week that ends at g5.
    week = SearchFilters(start=at(-1), end=at(6))
    assert keys(await repo.fulltext(SearchQuery(ns, 4, week, text="group"))) == [
        "g5",
        "g4",
        "g3",
        "g2",
    ]


async def test_fulltext_over_words_every_memory_shares_ranks_the_rare_match_via_gin(
    big: BigSet, big_session: DbSession
) -> None:
    """All 20,000 memories say "memory number"; only one says 12345."""
    repo = Search(big_session)
    question = "What was memory number 12345 about?"

    hits = await repo.fulltext(SearchQuery(big.namespace_id, 3, text=question))

    # The rare match, then the page filled with the newest common-word matches.
    assert keys(hits) == ["m12345", "m19999", "m19998"]
    assert [h.fulltext_score for h in hits] == pytest.approx(
        [3 * ONE_TERM / 3, 2 * ONE_TERM / 3, 2 * ONE_TERM / 3], rel=1e-6
    )
    plan = await words_of(repo, SearchQuery(big.namespace_id, 3, text=question))
    assert plan == TextPlan(
        all_q="'12345' | 'memori' | 'number'", rare_q="'12345'", common_q="'memori' | 'number'"
    )
    eligible = where(big.namespace_id, SearchFilters())
    params = {**text_params(TextList(3, plan, FULLTEXT_FILL_WINDOW)), **eligible.params}
    sql = "WITH " + text_ctes(eligible.sql, plan)
    explain = await big_session.execute(text(f"EXPLAIN {sql} SELECT * FROM text_hits"), params)
    # On TimescaleDB each chunk has its own copy: _hyper_1_2_chunk_memory_search_tsv.
    plan = "\n".join(explain.scalars())
    assert re.search(r"Bitmap Index Scan on (_hyper_\d+_\d+_chunk_)?memory_search_tsv\b", plan)


async def test_fulltext_on_an_analyzed_large_table_splits_words_by_their_statistics(
    big: BigSet, big_session: DbSession
) -> None:
    """Past LexemeStats.min_rows the column statistics estimate each word's matches, so no
    count statement runs; the split, and so the answer, is the one the counts gave."""
    now = [0.0]
    stats = LexemeStats(min_rows=BIG, ttl_s=60, clock=lambda: now[0])
    recorded = Recording(big_session)
    repo = Search(recorded, caches=SearchCaches(lexeme_stats=stats))  # type: ignore[arg-type]
    question = "What was memory number 12345 about?"
    hits = await repo.fulltext(SearchQuery(big.namespace_id, 3, text=question))
    plan = await words_of(repo, SearchQuery(big.namespace_id, 3, text=question))
    statements = recorded.statements

    # ANALYZE read all 20,000 rows: every memory says "memory number"; "12345" is untracked.
    frequencies = await repo.repository.lexeme_frequencies()
    assert frequencies is not None and frequencies.rows == BIG
    assert frequencies.freq["memori"] == frequencies.freq["number"] == 1.0
    assert "12345" not in frequencies.freq
    assert frequencies.matches("12345") == BIG * 0.005  # at most PostgreSQL's default
    assert plan == TextPlan(
        all_q="'12345' | 'memori' | 'number'", rare_q="'12345'", common_q="'memori' | 'number'"
    )
    assert keys(hits) == ["m12345", "m19999", "m19998"]
    # One statistics read (per TTL), then per search the lexemes and the search: no counts.
    assert sum("pg_stats" in s for s in statements) == 1
    assert not [s for s in statements if "AS matches" in s]
    assert len(statements) == 1 + 2 + 1

    # Below min_rows (or without statistics) the counts decide, as before.
    now[0] = 61.0
    stats.min_rows = BIG + 1
    assert await repo.repository.lexeme_frequencies() is None
    assert await words_of(repo, SearchQuery(big.namespace_id, 3, text=question)) == plan


# --- hybrid --------------------------------------------------------------------------------

FUSION_QUESTION = "Caroline support group parade"  # lexemes: carolin support group parad


@pytest.fixture
async def fusion(seed: Seed) -> int:
    """Vector ranks (query = e0) and full-text ranks fixed by construction.

    key     similarity  vector rank  words shared  text rank
    a       0.9         1            0             -
    x       0.8         2            3             2
    b       0.7         3            1             4
    z       0.6         4            0             -
    y       0.5         5            2             3
    e       pending     -            4             1
    """
    ns = await seed.namespace()
    bot = await seed.robot(ns, "bot")
    add = seed.memory
    await add(ns, bot, "a", "Sunset over the lake", created_at=at(1), embedding=seed.toward(0.9, 1))
    await add(ns, bot, "x", "Caroline found a support group", created_at=at(2),
              embedding=seed.toward(0.8, 2))  # fmt: skip
    await add(ns, bot, "b", "A parade downtown", created_at=at(3), embedding=seed.toward(0.7, 3))
    await add(ns, bot, "z", "Quiet morning", created_at=at(4), embedding=seed.toward(0.6, 4))
    await add(ns, bot, "y", "The support group met", created_at=at(5),
              embedding=seed.toward(0.5, 5))  # fmt: skip
    await add(ns, bot, "e", "Caroline marched with the support group in the parade",
              created_at=at(6))  # fmt: skip
    await add(ns, bot, "gone", "Caroline support group parade", created_at=at(7),
              embedding=seed.toward(0.99, 6), deleted=True)  # fmt: skip
    other = await seed.namespace()
    await add(other, await seed.robot(other, "bot"), "theirs", "Caroline support group parade",
              created_at=at(8), embedding=seed.toward(1.0, 7))  # fmt: skip
    return ns


def e0(dim: int) -> list[float]:
    return [1.0] + [0.0] * (dim - 1)


def toward_as_stored(s: float) -> float:
    """The similarity to e0 of Seed.toward(s, axis) as the database stores the two vectors:
    s itself for `vector`, within ~1e-3 of it for `halfvec`."""
    return similarity([s, float(np.sqrt(1 - s**2))], [1.0, 0.0])


# key: similarity to e0 (Seed.toward) in the fusion set, in vector rank order
FUSION_SIMS = {"a": 0.9, "x": 0.8, "b": 0.7, "z": 0.6, "y": 0.5}

RANKS = {  # key: (vector rank, text rank)
    "a": (1, None),
    "x": (2, 2),
    "b": (3, 4),
    "z": (4, None),
    "y": (5, 3),
    "e": (None, 1),
}


def rrf(key: str, k: int) -> float:
    v, t = RANKS[key]
    return (1 / (k + v) if v else 0.0) + (1 / (k + t) if t else 0.0)


@pytest.mark.parametrize(
    ("k", "order"),
    [
        # x .03226, b .03150, y .03126, then e and a tie at 1/61 (e is newer), z 1/64
        (60, ["x", "b", "y", "e", "a", "z"]),
        # with k = 1 single first places weigh more: x .667, e = a = .5, b .45, y .417, z .2
        (1, ["x", "e", "a", "b", "y", "z"]),
    ],
)
async def test_hybrid_scores_are_exact_reciprocal_rank_fusion(
    session: DbSession, fusion: int, dim: int, k: int, order: list[str]
) -> None:
    hits = await Search(session).hybrid(
        SearchQuery(fusion, 10, text=FUSION_QUESTION, vector=e0(dim), fusion=Fusion(k=k))
    )

    assert keys(hits) == order
    assert [h.score for h in hits] == pytest.approx([rrf(key, k) for key in order], rel=1e-12)
    assert {h.key: (h.vector_rank, h.fulltext_rank) for h in hits} == RANKS
    sims = {h.key: h.vector_similarity for h in hits}
    assert sims == pytest.approx(
        {**{k: toward_as_stored(s) for k, s in FUSION_SIMS.items()}, "e": None}, abs=1e-6
    )
    # vector-only (a, z) and full-text-only (e) hits both take part
    assert {h.key for h in hits if h.fulltext_rank is None} == {"a", "z"}
    assert {h.key for h in hits if h.vector_rank is None} == {"e"}


async def test_hybrid_limit_takes_the_best_fused(session: DbSession, fusion: int, dim: int) -> None:
    hits = await Search(session).hybrid(
        SearchQuery(fusion, 3, text=FUSION_QUESTION, vector=e0(dim))
    )
    assert keys(hits) == ["x", "b", "y"]


async def test_hybrid_without_embedding_is_fulltext_only_fusion(
    session: DbSession, fusion: int
) -> None:
    hits = await Search(session).hybrid(SearchQuery(fusion, 10, text=FUSION_QUESTION, vector=None))

    assert keys(hits) == ["e", "x", "y", "b"]
    assert [h.score for h in hits] == [1 / 61, 1 / 62, 1 / 63, 1 / 64]
    assert [h.fulltext_rank for h in hits] == [1, 2, 3, 4]
    assert {(h.vector_rank, h.vector_similarity) for h in hits} == {(None, None)}


async def test_hybrid_with_only_stop_words_is_the_vector_ranking(
    session: DbSession, fusion: int, dim: int
) -> None:
    hits = await Search(session).hybrid(
        SearchQuery(fusion, 10, text="What was it?", vector=e0(dim))
    )

    assert keys(hits) == ["a", "x", "b", "z", "y"]
    assert [h.score for h in hits] == [1 / 61, 1 / 62, 1 / 63, 1 / 64, 1 / 65]
    assert {(h.fulltext_rank, h.fulltext_score) for h in hits} == {(None, None)}


async def test_vector_skips_pending_deleted_and_other_namespaces(
    session: DbSession, fusion: int, dim: int
) -> None:
    hits = await Search(session).vector(SearchQuery(fusion, 10, vector=e0(dim)))
    assert keys(hits) == ["a", "x", "b", "z", "y"]
    expected = [toward_as_stored(s) for s in FUSION_SIMS.values()]
    assert [h.score for h in hits] == pytest.approx(expected, abs=1e-6)


async def test_search_works_with_the_binary_vector_codec(database_url: str, dim: int) -> None:
    """The service's engine registers pgvector's binary codec; the query vector still binds."""
    engine = engine_for(database_url)

    @event.listens_for(engine.sync_engine, "connect")
    def _codec(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.run_async(register_vector)

    try:
        async with DbSession(engine) as s:
            seed = Seed(s, dim)
            ns = await seed.namespace()
            bot = await seed.robot(ns, "bot")
            await seed.memory(ns, bot, "near", "near", created_at=at(1),
                              embedding=seed.toward(0.9, 1))  # fmt: skip
            await seed.memory(ns, bot, "far", "far", created_at=at(2),
                              embedding=seed.toward(0.1, 2))  # fmt: skip
            repo = Search(s)
            assert keys(await repo.vector(SearchQuery(ns, 5, vector=e0(dim)))) == [
                "near",
                "far",
            ]
            assert keys(await repo.hybrid(SearchQuery(ns, 5, text="far", vector=e0(dim)))) == [
                "far",
                "near",
            ]
            await s.rollback()
    finally:
        await engine.dispose()


# --- filters -------------------------------------------------------------------------------


@pytest.fixture
async def varied(seed: Seed) -> dict[str, int]:
    """Five memories that differ in every filterable attribute; all mention "memo"."""
    ns = await seed.namespace()
    alice = await seed.robot(ns, "alice")
    bob = await seed.robot(ns, "bob")
    day = lambda d: datetime(2026, 1, d, tzinfo=UTC)  # noqa: E731
    rows = [
        ("k1", alice, "fact", ["a", "b"], 1.0, {"project": "x", "n": 1}, day(1)),
        ("k2", bob, "event", ["b"], 5.0, {"project": "y"}, day(5)),
        ("k3", alice, "preference", ["a", "c"], 9.0,
         {"project": "x", "lang": {"name": "py"}}, day(10)),
        ("k4", bob, "fact", [], 3.0, {}, day(15)),
        ("k5", alice, "event", ["a", "b", "c"], 7.5, {"project": "x", "n": 2}, day(20)),
    ]  # fmt: skip
    for i, (key, author, type_, tags, importance, metadata, created) in enumerate(rows):
        await seed.memory(ns, author, key, f"memo {key}", created_at=created,
                          embedding=seed.toward(0.9 - i / 10, i + 1), type=type_, tags=tags,
                          importance=importance, metadata=metadata)  # fmt: skip
    return {"ns": ns, "alice": alice}


async def test_hits_carry_the_memory_as_stored(
    session: DbSession, varied: dict[str, int], dim: int
) -> None:
    hits = await Search(session).vector(
        SearchQuery(
            varied["ns"], 10, SearchFilters(metadata={"lang": {"name": "py"}}), vector=e0(dim)
        )
    )

    assert len(hits) == 1
    hit = hits[0]
    assert (hit.key, hit.content, hit.type, hit.importance, hit.tags, hit.author) == (
        "k3", "memo k3", "preference", 9.0, ["a", "c"], "alice",
    )  # fmt: skip
    assert hit.metadata == {"project": "x", "lang": {"name": "py"}}
    assert (hit.created_at, hit.token_count) == (datetime(2026, 1, 10, tzinfo=UTC), 5)
    assert (hit.vector_rank, hit.fulltext_rank, hit.fulltext_score) == (1, None, None)
    assert hit.vector_similarity == pytest.approx(toward_as_stored(0.7), abs=1e-6)


FILTER_CASES = [
    ("none", {}, {"k1", "k2", "k3", "k4", "k5"}),
    ("author", {"author_robot_id": "alice"}, {"k1", "k3", "k5"}),
    ("types", {"types": ["event", "preference"]}, {"k2", "k3", "k5"}),
    ("tags_any", {"tags_any": ["c", "zzz"]}, {"k3", "k5"}),
    ("tags_all", {"tags_all": ["a", "b"]}, {"k1", "k5"}),
    ("min_importance", {"min_importance": 5.0}, {"k2", "k3", "k5"}),
    ("metadata", {"metadata": {"project": "x"}}, {"k1", "k3", "k5"}),
    ("metadata_nested", {"metadata": {"lang": {"name": "py"}}}, {"k3"}),
    ("start_inclusive", {"start": datetime(2026, 1, 5, tzinfo=UTC)}, {"k2", "k3", "k4", "k5"}),
    ("end_exclusive", {"end": datetime(2026, 1, 15, tzinfo=UTC)}, {"k1", "k2", "k3"}),
    (
        "start_and_end",
        {"start": datetime(2026, 1, 5, tzinfo=UTC), "end": datetime(2026, 1, 15, tzinfo=UTC)},
        {"k2", "k3"},
    ),
    (
        "combined",
        {"author_robot_id": "alice", "min_importance": 5.0, "tags_any": ["c"]},
        {"k3", "k5"},
    ),
    ("nothing_matches", {"types": ["no-such-type"]}, set()),
]


@pytest.mark.parametrize("strategy", ["vector", "fulltext", "hybrid"])
@pytest.mark.parametrize(
    ("case", "given", "expected"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
async def test_filters_select_exactly_the_matching_memories(
    session: DbSession,
    varied: dict[str, int],
    dim: int,
    strategy: str,
    case: str,
    given: dict[str, Any],
    expected: set[str],
) -> None:
    values = dict(given)
    if values.get("author_robot_id") == "alice":
        values["author_robot_id"] = varied["alice"]
    filters = SearchFilters(**values)
    repo = Search(session)
    ns = varied["ns"]

    if strategy == "vector":
        hits = await repo.vector(SearchQuery(ns, 10, filters, vector=e0(dim)))
    elif strategy == "fulltext":
        hits = await repo.fulltext(SearchQuery(ns, 10, filters, text="memo"))
    else:
        hits = await repo.hybrid(SearchQuery(ns, 10, filters, text="memo", vector=e0(dim)))

    assert set(keys(hits)) == expected
    if strategy == "vector":  # similarity falls with the key's number
        assert keys(hits) == sorted(expected)
