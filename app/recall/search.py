"""One search, as one straight walk: gather what the planner needs (SearchRepository.gather,
once) → plan (planner.plan_search: a value naming every choice) → render (statements.render)
→ run (SearchRepository.run) → hits (hits.hits_of). The three strategies are its ways in."""

from __future__ import annotations

from app.db.session import DbSession
from app.recall.caches import SearchCaches
from app.recall.hits import SearchHit, hits_of
from app.recall.planner import EF_SEARCH_DEFAULT, Bounds, SearchPlan, Strategy, plan_search
from app.recall.query import SearchQuery
from app.recall.repository import SearchRepository
from app.recall.statements import render


class Search:
    """Vector, full-text and hybrid search over long-term memory."""

    def __init__(
        self,
        session: DbSession,
        ef_search: int = EF_SEARCH_DEFAULT,
        caches: SearchCaches | None = None,
    ) -> None:
        self.caches = caches if caches is not None else SearchCaches()
        self.repository = SearchRepository(session, self.caches)
        self.bounds = Bounds(ef_search=ef_search)

    async def plan(self, query: SearchQuery, strategy: Strategy) -> SearchPlan | None:
        """What the search will run (None: it can find nothing)."""
        facts = await self.repository.gather(query, strategy, self.bounds)
        return plan_search(query, strategy, facts, bounds=self.bounds)

    async def find(self, query: SearchQuery, strategy: Strategy) -> list[SearchHit]:
        """The hits of `query` by `strategy`: its plan, rendered and run."""
        if query.limit <= 0:
            return []
        plan = await self.plan(query, strategy)
        if plan is None:
            return []
        steps = render(plan)
        rows, counted = await self.repository.run(steps)
        large = counted is not None and counted > self.bounds.exact_max_rows
        if plan.large or (large and query.filters.unfiltered):
            self.caches.large_namespaces.add(query.namespace_id)
        return hits_of(plan, rows)

    async def vector(self, query: SearchQuery) -> list[SearchHit]:
        """The `limit` nearest memories by cosine distance; score = similarity (1 - distance).

        HNSW applies the WHERE clause after the graph walk, which yields at most ef_search
        candidates; a selective filter (and namespace scoping and soft deletes are filters
        too) can leave fewer than `limit` of them, and pgvector < 0.8 then silently returns
        a short page. pgvector >= 0.8 walks on (iterative scan, relaxed order: strict order
        agreed with exact search on 76 % of a filtered top 10 where relaxed agreed on 92 %,
        the eval's facts namespace beside 25 others at ef_search 100; the statement re-sorts
        by distance) but still stops at hnsw.max_scan_tuples. So whenever the index path
        returns fewer than `limit` rows, the exact query runs: it is planned on the btree
        filters, and its cost is that of the filtered set, which is small exactly when
        post-filtering starved the index scan.
        Which way runs first is planner.route's choice.
        """
        return await self.find(query, "vector")

    async def fulltext(self, query: SearchQuery) -> list[SearchHit]:
        """Memories sharing content words with the query's text, best first; score = ts_rank.

        Questions are matched as an OR of their content lexemes (stop words dropped, each
        lexeme stemmed once by to_tsvector), so "When did Caroline go to the support group?"
        finds memories that mention any of caroline | go | support | group. Ranking is
        ts_rank (statements.ts_rank says why not ts_rank_cd). Ties: newest first, then id.

        Bounding the work. Common words ("go") match most memories, and ranking means
        reading and scoring every match. So each lexeme's matches are estimated from the
        column statistics ANALYZE keeps (LexemeStats), or, in a table too small or not yet
        analyzed, counted among the eligible memories, each count capped at B+1
        (B = candidate_budget). The rarest lexemes whose matches together fit in B (the
        informative words: names, topics) select the candidates (planner.split_lexemes).
        Memories matching only the remaining common words are considered only when the rare
        ones leave the page short, and then only among the newest W eligible memories
        (W = fill_window, read in created_at order through the btree, whatever their words).
        All candidates are ranked by the full OR query; when every lexeme fits in B this is
        exactly the unbounded ranking.
        The trade-off is an IDF-like prior that ts_rank lacks: a memory sharing only common
        words with the question can no longer outrank one sharing a rare word, and when the
        page must be filled with common-word matches, older ones outside the window are not
        scored. In exchange about B + W rows are read and ranked, whatever the namespace's
        size (bench/README.md has the figures). A question's first MAX_QUERY_LEXEMES
        content words are used, the rest ignored.
        """
        return await self.find(query, "fulltext")

    async def hybrid(self, query: SearchQuery) -> list[SearchHit]:
        """The fusion of the vector and full-text rankings (fusion.FUSIONS), blended with
        relevance signals (evaluated at the query's `now`), in one statement.

        Each list contributes its top N = query.candidates memories, ranked 1..N. Ties:
        newest first, then id. Without a vector only the full-text list runs (vector ranks
        are null). The vector list gets the same guarantee as `vector`: when its index scan
        yields fewer than N candidates, the statement runs again with the exact vector CTE.
        """
        return await self.find(query, "hybrid")
