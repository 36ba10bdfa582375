"""Runs a search (query.SearchQuery): the only part of recall that runs SQL. It reads what the
planner needs (the pgvector version, the lexemes' statistics, an estimate or a capped count
of the eligible memories), takes the planner's decisions (planner.py), runs the statements
built for them (statements.py) and maps rows to SearchHit. The session is inside the
request's transaction."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql, vector_text
from app.recall import planner
from app.recall import statements as q
from app.recall.caches import SearchCaches
from app.recall.fusion import SIGNAL_NAMES, fusion_params, signal_params
from app.recall.hits import SearchHit, hit, hybrid_hit, vector_hit
from app.recall.planner import (
    EF_SEARCH_DEFAULT,
    ESTIMATE_MIN_ROWS,
    EXACT_SEARCH_MAX_ROWS,
    FULLTEXT_CANDIDATE_BUDGET,
    FULLTEXT_FILL_WINDOW,
    INDEX,
    MAX_QUERY_LEXEMES,
    LexemeFrequencies,
    PgvectorVersion,
    Route,
    TextPlan,
    exact_search_suffices,
    hnsw_settings,
    lexeme_frequencies,
    parse_pgvector_version,
    split_lexemes,
)
from app.recall.query import SearchQuery

__all__ = ["SearchCaches", "SearchHit", "SearchQuery", "SearchRepository"]


class SearchRepository:
    """Vector, full-text and hybrid search over long-term memory."""

    def __init__(
        self,
        session: DbSession,
        ef_search: int = EF_SEARCH_DEFAULT,
        caches: SearchCaches | None = None,
    ) -> None:
        self.session = session
        self.ef_search = ef_search
        self.caches = caches if caches is not None else SearchCaches()
        self.vectors = self.caches.vectors
        # Work bounds (planner.py); tests lower them to reach their branches on small data.
        self.exact_max_rows = EXACT_SEARCH_MAX_ROWS
        self.estimate_min_rows = ESTIMATE_MIN_ROWS
        self.candidate_budget = FULLTEXT_CANDIDATE_BUDGET
        self.fill_window = FULLTEXT_FILL_WINDOW

    def _params(self, query: SearchQuery, **more: Any) -> dict[str, Any]:
        """The query's WHERE values and a statement's own."""
        return {**query.where.params, **more}

    async def _run(self, statement: str, params: dict[str, Any]) -> list[Any]:
        return (await self.session.execute(sql(statement), params)).all()

    # --- what the planner needs to know --------------------------------------------------

    async def pgvector_version(self) -> PgvectorVersion:
        """The installed pgvector extension's version (cached per app)."""
        version = self.caches.pgvector.current()
        if version is None:
            raw = (await self.session.execute(sql(q.PGVECTOR_VERSION))).scalar_one()
            version = parse_pgvector_version(raw)
            self.caches.pgvector.remember(version)
        return version

    async def _hnsw_settings(self, candidates: int) -> dict[str, str]:
        return hnsw_settings(await self.pgvector_version(), candidates, self.ef_search)

    async def _lexeme_frequencies(self) -> LexemeFrequencies | None:
        stats = self.caches.lexeme_stats
        cached = stats.current()
        if cached is not None:
            return cached[0]
        row = (await self.session.execute(sql(q.LEXEME_STATS))).one()
        found = lexeme_frequencies(row.rows, row.lexemes, row.freqs, stats.min_rows)
        stats.remember(found)
        return found

    async def _route(self, query: SearchQuery, wanted: int) -> Route:
        """How a vector search for the `wanted` nearest runs (planner.route)."""
        large = self.caches.large_namespaces
        if query.filters.unfiltered and query.namespace_id in large:
            return INDEX
        chosen = planner.route(
            await self._estimate(query), wanted, await self.pgvector_version(), self.ef_search
        )
        if query.filters.unfiltered and not (chosen.count or chosen.exact):
            large.add(query.namespace_id)
        return chosen

    async def _estimate(self, query: SearchQuery) -> tuple[float, float] | None:
        """(the embedded memories passing the filters as the planner estimates them, the
        table's rows), or None when the table holds fewer than estimate_min_rows by its
        statistics (or has none yet). Nothing is read but the statistics."""
        rows = self.caches.table_rows.current()
        if rows is None:
            rows = float((await self.session.execute(sql(q.TABLE_ROWS))).scalar_one())
            self.caches.table_rows.remember(rows)
        if rows < self.estimate_min_rows:
            return None
        statement = sql(q.estimate(query.where.sql))
        plan = (await self.session.execute(statement, query.where.params)).scalar_one()
        if isinstance(plan, str):  # a connection without the json codec
            plan = json.loads(plan)
        return float(plan[0]["Plan"]["Plan Rows"]), rows

    def _small(self, query: SearchQuery, counted: int) -> bool:
        """Whether a capped count means exact search; remembers a large namespace."""
        if exact_search_suffices(counted, self.exact_max_rows):
            return True
        if query.filters.unfiltered:
            self.caches.large_namespaces.add(query.namespace_id)
        return False

    async def _count_is_small(self, query: SearchQuery) -> bool:
        """Count the eligible embedded memories, up to the cap: few enough for exact search?"""
        params = self._params(query, cap=self.exact_max_rows + 1)
        statement = sql(f"SELECT {q.ready_count(query.where.sql)}")
        return self._small(query, (await self.session.execute(statement, params)).scalar_one())

    # --- vector --------------------------------------------------------------------------

    async def vector(self, query: SearchQuery) -> list[SearchHit]:
        """The `limit` nearest memories by cosine distance; score = similarity (1 - distance).

        HNSW applies the WHERE clause after the graph walk, which yields at most ef_search
        candidates; a selective filter (and namespace scoping and soft deletes are filters
        too) can leave fewer than `limit` of them, and pgvector < 0.8 then silently returns
        a short page. pgvector >= 0.8 walks on (iterative scan, strict order) but still stops
        at hnsw.max_scan_tuples. So whenever the index path returns fewer than `limit` rows,
        the exact query runs: it is planned on the btree filters, and its cost is that of the
        filtered set, which is small exactly when post-filtering starved the index scan.
        Which way runs first is planner.route's choice.
        """
        assert query.vector is not None, "a vector search needs the query's vector"
        if query.limit <= 0:
            return []
        route = await self._route(query, query.limit)
        if route.count:
            hits, eligible_n = await self._exact_search_counting(query)
            if self._small(query, eligible_n):
                return hits
        if route.exact:
            return await self._vector_hits(query, exact=True)
        hits = await self._vector_hits(query, settings=await self._hnsw_settings(query.limit))
        if len(hits) < query.limit:
            hits = await self._vector_hits(query, exact=True)
        return hits

    async def _exact_search_counting(self, query: SearchQuery) -> tuple[list[SearchHit], int]:
        """The exact answer, and how many embedded memories pass the filters (counted up to
        the cap), in one pass over them. The answer is empty when they are more than the
        exact-search maximum: then the index is the way."""
        assert query.vector is not None
        params = self._params(
            query,
            qvec=vector_text(query.vector),
            vec_n=query.limit,
            cap=self.exact_max_rows + 1,
            max_rows=self.exact_max_rows,
        )
        storage = await self.vectors.storage(self.session)
        rows = await self._run(q.exact_search_with_count(query.where.sql, storage), params)
        return [vector_hit(r) for r in rows if r["id"] is not None], rows[0]["eligible_n"]

    async def _vector_hits(
        self, query: SearchQuery, *, exact: bool = False, settings: dict[str, str] | None = None
    ) -> list[SearchHit]:
        """The nearest `limit`; `settings` are set (transaction-locally) by the statement."""
        assert query.vector is not None
        params = self._params(query, qvec=vector_text(query.vector), vec_n=query.limit)
        if settings:
            params.update(q.settings_params(settings))
        storage = await self.vectors.storage(self.session)
        statement = q.vector_search(query.where.sql, exact, bool(settings), storage)
        return [vector_hit(row) for row in await self._run(statement, params)]

    # --- full text -----------------------------------------------------------------------

    async def fulltext(self, query: SearchQuery) -> list[SearchHit]:
        """Memories sharing content words with the query's text, best first; score = ts_rank.

        Questions are matched as an OR of their content lexemes (stop words dropped, each
        lexeme stemmed once by to_tsvector), so "When did Caroline go to the support group?"
        finds memories that mention any of caroline | go | support | group.

        Ranking is ts_rank, not ts_rank_cd: for an OR query every single occurrence is a
        cover, so cover density degenerates into counting occurrences, and a memory saying
        "group" five times would beat one matching "caroline", "support" and "group".
        ts_rank sums per lexeme with diminishing returns for repeats, so memories that share
        more distinct words with the question rank first. Ties: newest first, then id.

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
        if query.limit <= 0:
            return []
        plan = await self._text_plan(query, query.limit)
        if plan is None:
            return []
        params = self._params(query, **q.text_params(plan, query.limit, self.fill_window))
        rows = await self._run(q.fulltext_search(query.where.sql, plan), params)
        return [
            hit(
                row,
                score=row["text_score"],
                fulltext_rank=row["text_rank"],
                fulltext_score=row["text_score"],
            )
            for row in rows
        ]

    async def _text_plan(
        self,
        query: SearchQuery,
        wanted: int,
        settings: dict[str, str] | None = None,
        count_vectors: bool = False,
    ) -> TextPlan | None:
        """The question's lexemes, with their match counts, split by planner.split_lexemes.

        The counts are the column statistics' estimates (LexemeStats) when the table is
        large and analyzed; otherwise each lexeme's matches among the eligible memories,
        counted and capped at budget + 1. Estimates are table-wide, so under a filter a word
        may count as common that is rare among the filtered memories: its matches are then
        looked for in the window, which holds every eligible memory when they are few.
        None when the question has no content lexemes (only stop words or punctuation).
        `settings` are set (transaction-locally) in the same round trip. With
        `count_vectors` the plan also carries `vector_eligible`, counted in a statement the
        plan makes anyway.
        """
        frequencies = await self._lexeme_frequencies()
        budget = max(self.candidate_budget, wanted)
        params: dict[str, Any] = {"query": query.text, "max_lexemes": MAX_QUERY_LEXEMES}
        params.update(q.settings_params(settings or {}))
        # Without a count statement to ride along, the vector count rides here.
        vector_count = ""
        if frequencies is not None and count_vectors:
            params.update(query.where.params, cap=self.exact_max_rows + 1)
            vector_count = f", {q.ready_count(query.where.sql)} AS vector_eligible"
        found = (await self._run(q.question_lexemes(vector_count), params))[0]
        terms: list[str] | None = found.terms
        if not terms:
            return None
        vector_eligible: int | None = None
        if frequencies is not None:
            matches = {i: frequencies.matches(lexeme) for i, lexeme in enumerate(found.lexemes)}
            if count_vectors:
                vector_eligible = found.vector_eligible
        else:
            matches, vector_eligible = await self._count_lexemes(
                query, terms, budget, count_vectors
            )
        plan = split_lexemes(terms, matches, budget)
        return dataclasses.replace(plan, vector_eligible=vector_eligible)

    async def _count_lexemes(
        self, query: SearchQuery, terms: list[str], budget: int, count_vectors: bool
    ) -> tuple[dict[int, float], int | None]:
        """Each term's matches among the eligible memories, capped at budget + 1 (and the
        capped count of embedded eligible memories, with `count_vectors`)."""
        params = self._params(query, df_cap=budget + 1)
        params.update({f"t{i}": term for i, term in enumerate(terms)})
        if count_vectors:
            params["cap"] = self.exact_max_rows + 1
        statement = q.lexeme_counts(query.where.sql, len(terms), count_vectors)
        matches = {i: n for i, n in await self._run(statement, params)}
        vector_eligible = matches.pop(-1, None)  # the count_vectors row, if asked for
        return matches, vector_eligible

    # --- hybrid --------------------------------------------------------------------------

    async def hybrid(self, query: SearchQuery) -> list[SearchHit]:
        """The fusion of the vector and full-text rankings (fusion.Fusion), blended with
        relevance signals (evaluated at the query's `now`), in one statement.

        Each side contributes its top N = query.candidates memories, ranked 1..N. Ties:
        newest first, then id. Without a vector only the full-text side runs (vector ranks
        are null). The vector side gets the same guarantee as `vector`: when its index scan
        yields fewer than N candidates, the statement runs again with the exact vector CTE.
        """
        if query.limit <= 0:
            return []
        n = query.candidates
        if query.vector is None:
            plan = await self._text_plan(query, n)
            if plan is None:
                return []
            return (await self._hybrid_once(query, plan, exact=True))[0]
        # The HNSW settings ride along with the lexeme look-up: one round trip fewer. So
        # does the count that decides between exact and index search, when it is needed.
        settings = await self._hnsw_settings(n)
        route = await self._route(query, n)
        plan = await self._text_plan(query, n, settings, count_vectors=route.count)
        exact = route.exact
        if route.count and plan is not None and plan.vector_eligible is not None:
            exact = exact or self._small(query, plan.vector_eligible)
        elif route.count:
            exact = exact or await self._count_is_small(query)
        hits, vector_found = await self._hybrid_once(query, plan, exact=exact)
        if not exact and vector_found < n:
            hits, _ = await self._hybrid_once(query, plan, exact=True)
        return hits

    async def _hybrid_once(
        self, query: SearchQuery, plan: TextPlan | None, *, exact: bool
    ) -> tuple[list[SearchHit], int]:
        """One fused statement; also returns how many candidates the vector side found."""
        params = self._params(query, limit=query.limit)
        params.update(fusion_params(query.fusion))
        params.update(signal_params(query.signals, query.now))
        if query.vector is not None:
            params.update(qvec=vector_text(query.vector), vec_n=query.candidates)
        if plan is not None:
            params.update(q.text_params(plan, query.candidates, self.fill_window))
        storage = await self.vectors.storage(self.session)
        statement = q.hybrid_search(
            query.where.sql,
            plan,
            query.vector is not None,
            exact,
            storage,
            query.fusion,
            query.signals,
        )
        rows = await self._run(statement, params)
        names = SIGNAL_NAMES if query.signals.active else ()
        hits = [hybrid_hit(row, names) for row in rows]
        # No rows at all means neither side found anything: the vector side found 0.
        return hits, (rows[0]["vector_found"] if rows else 0)
