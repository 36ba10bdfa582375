# ruff: noqa: F811  (the fixtures imported from test_search are parameters here)
"""How a vector search chooses between exact search and the HNSW index (planner.route,
planner.exact_is_cheaper, planner.route_for): the cost model's arithmetic, the routes it
takes on the 20,000-memory set, and exact answers when the estimate alone chose exact search."""

from __future__ import annotations

from app.db.session import DbSession
from app.recall import planner
from app.recall.caches import PgvectorVersions, SearchCaches
from app.recall.planner import Facts, Route, exact_is_cheaper, index_scan_tuples
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from app.recall.statements import render
from tests.recall.test_search import (  # noqa: F401  (fixtures)
    BIG,
    WEEK,
    BigSet,
    Recording,
    big,
    big_session,
    nearest,
    query_vector,
)

M = 1_000_000
ITERATIVE, OLD = (0, 8, 5), (0, 7, 4)


def test_an_iterative_scan_visits_about_wanted_over_selectivity() -> None:
    assert index_scan_tuples(10_000, M, 10, version=ITERATIVE, ef_search=100) == 1_000
    assert index_scan_tuples(10_000, M, 80, version=ITERATIVE, ef_search=100) == 8_000
    assert (
        index_scan_tuples(M, M, 10, version=ITERATIVE, ef_search=100) == 100
    )  # the first walk's ef_search
    assert (
        index_scan_tuples(M, M, 300, version=ITERATIVE, ef_search=100) == 300
    )  # ef_search grows to the page
    # 80 of 1,000 would take 80,000 tuples: past max_scan_tuples, the scan comes back short.
    assert index_scan_tuples(1_000, M, 80, version=ITERATIVE, ef_search=100) is None


def test_a_scan_without_iterative_scans_comes_back_short_under_a_selective_filter() -> None:
    assert (
        index_scan_tuples(500_000, M, 10, version=OLD, ef_search=100) == 100
    )  # ~50 of its 100 pass
    assert index_scan_tuples(50_000, M, 10, version=OLD, ef_search=100) is None  # ~5 pass: short


def test_exact_search_wins_where_it_reads_fewer_rows_than_the_walk_costs() -> None:
    # One robot's 1 % of a million memories: its 10 nearest exactly (the walk: 1,000 tuples,
    # worth 20,000 rows), its 80 nearest (hybrid's candidates: 8,000 tuples) all the more.
    assert exact_is_cheaper(10_000, M, 10, version=ITERATIVE)
    assert exact_is_cheaper(10_000, M, 80, version=ITERATIVE)
    # A week of a year (1.9 %): its 10 nearest through the index (526 tuples, worth 10,526
    # rows); its 80 exactly (4,211 tuples). 5 %, and the whole table: the index.
    assert not exact_is_cheaper(19_000, M, 10, version=ITERATIVE)
    assert exact_is_cheaper(19_000, M, 80, version=ITERATIVE)
    assert not exact_is_cheaper(50_000, M, 10, version=ITERATIVE)
    assert not exact_is_cheaper(M, M, 10, version=ITERATIVE)
    # Where the scan would come back short, exact search whatever the size.
    assert exact_is_cheaper(900, M, 80, version=ITERATIVE)
    assert exact_is_cheaper(50_000, M, 10, version=OLD)


def repository(session: DbSession) -> Search:
    return Search(session, 100, SearchCaches(pgvector=PgvectorVersions(forced=ITERATIVE)))


async def facts_of(search: Search, query: SearchQuery) -> Facts:
    return await search.repository.gather(query, "vector", search.bounds)


async def route_of(search: Search, query: SearchQuery) -> Route:
    """The vector list's route (planner.route_for) from the facts gathered for it."""
    return planner.route_for(query, "vector", await facts_of(search, query), bounds=search.bounds)


async def routed(big: BigSet, session: DbSession, filters: SearchFilters, wanted: int) -> Route:
    query = SearchQuery(big.namespace_id, wanted, filters, vector=query_vector(big, 1).tolist())
    return await route_of(repository(session), query)


async def test_routes_on_the_analyzed_set(big: BigSet, big_session: DbSession) -> None:
    repo = repository(big_session)
    by_author = SearchFilters(author_robot_id=big.author_id)
    week = SearchFilters(start=WEEK[0], end=WEEK[1])

    def of(filters: SearchFilters) -> SearchQuery:
        return SearchQuery(big.namespace_id, 20, filters, vector=query_vector(big, 1).tolist())

    # ANALYZE read every row of the set: its estimates are the counts, near enough.
    assert (await facts_of(repo, of(SearchFilters()))).estimate == (BIG, BIG)
    estimated, _ = (await facts_of(repo, of(week))).estimate or (0.0, 0.0)
    assert 384 * 0.8 < estimated < 384 * 1.2
    # The whole namespace: far too many to count, the index. A robot's 50 and a week's 384:
    # counted (they may be few), and exact when they are not (384 rows against a walk of
    # 20 / (384 / 20,000) ≈ 1,042 tuples).
    assert await routed(big, big_session, SearchFilters(), 20) == Route(count=False, exact=False)
    assert await routed(big, big_session, by_author, 20) == Route(count=True, exact=True)
    assert await routed(big, big_session, week, 20) == Route(count=True, exact=True)
    # Below ESTIMATE_MIN_ROWS no estimate is made: the count decides, then the index.
    repo.bounds.estimate_min_rows = BIG + 1
    assert (await facts_of(repo, of(by_author))).estimate is None
    assert await route_of(repo, of(by_author)) == Route(count=True, exact=False)


async def test_exact_search_chosen_by_the_estimate_alone_gives_the_exact_answer(
    big: BigSet, big_session: DbSession, monkeypatch
) -> None:
    """With counting switched off, the author's 50 memories are searched exactly on the
    estimate's word: one EXPLAIN, no count, no index statement."""
    monkeypatch.setattr(planner, "COUNT_BELOW_ESTIMATE", 0)
    recorded = Recording(big_session)
    repo = Search(recorded)  # type: ignore[arg-type]
    q = query_vector(big, 11)
    expected, _ = nearest(q, big.vectors[big.authored], big.ids[big.authored], 20)
    filters = SearchFilters(author_robot_id=big.author_id)

    query = SearchQuery(big.namespace_id, 20, filters, text="xylophone", vector=q.tolist())
    hits = await repo.vector(query)
    assert [h.id for h in hits] == expected

    hybrid = await repo.hybrid(query)
    assert [h.id for h in hybrid] == expected
    assert [h.vector_rank for h in hybrid] == list(range(1, 21))

    sent = recorded.statements
    assert sum(s.startswith("EXPLAIN") for s in sent) == 2
    assert not [s for s in sent if ") AS e)" in s]  # repository.ready_count
    assert not [s for s in sent if "m.embedding <=> CAST" in s and "+ 0, m.id" not in s]


async def test_a_hybrid_plan_is_a_value_naming_its_lists_route_index_ranker_and_fusion(
    big: BigSet, big_session: DbSession
) -> None:
    """The plan is decided before anything runs, and says what will run: the whole namespace
    through the index (its statement first, the exact one after it should it come back
    short), one robot's 50 memories exactly, in one statement."""
    search = repository(big_session)
    q = query_vector(big, 1).tolist()
    question = "What was memory number 12345 about?"

    whole = await search.plan(SearchQuery(big.namespace_id, 10, text=question, vector=q), "hybrid")
    assert whole is not None and whole.vector is not None and whole.text is not None
    assert whole.vector.route == Route(count=False, exact=False) and whole.large
    assert whole.vector.depth == whole.text.depth == 80  # k + 2 · limit
    assert whole.vector.index == {
        "hnsw.ef_search": "100",
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": "20000",
    }
    assert whole.text.ranker == "ts_rank"
    assert whole.text.words.all_q == "'12345' | 'memori' | 'number'"
    assert whole.query.fusion.method == "rrf"
    assert [s.stands for s in render(whole)] == ["vector_found", "always"]

    by_author = SearchFilters(author_robot_id=big.author_id)
    robots = await search.plan(SearchQuery(big.namespace_id, 10, by_author, vector=q), "hybrid")
    assert robots is not None and robots.vector is not None and robots.text is None
    assert robots.vector.route == Route(count=False, exact=True) and not robots.large
    assert [s.stands for s in render(robots)] == ["always"]
