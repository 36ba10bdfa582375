"""Runs recall's statements (statements.py) with the planner's decisions (planner.py) and
maps rows to SearchHit. The session is inside the request's transaction."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql, vector_text
from app.db.vectors import StoredVectors
from app.recall import statements as q
from app.recall.caches import (
    LargeNamespaces,
    LexemeStats,
    PgvectorVersions,
    SearchCaches,
    TableRows,
)
from app.recall.eligibility import Eligibility, Route
from app.recall.fusion import SIGNAL_NAMES, fusion_params, signal_params
from app.recall.hits import SearchHit, hit, hybrid_hit, vector_hit
from app.recall.planner import (
    EF_SEARCH_DEFAULT,
    EXACT_SEARCH_MAX_ROWS,
    FULLTEXT_CANDIDATE_BUDGET,
    FULLTEXT_FILL_WINDOW,
    MAX_QUERY_LEXEMES,
    NO_SIGNALS,
    Fused,
    Fusion,
    LexemeFrequencies,
    PgvectorVersion,
    SearchFilters,
    Signals,
    TextPlan,
    hnsw_settings,
    hybrid_candidates,
    lexeme_frequencies,
    parse_pgvector_version,
    split_lexemes,
)

__all__ = ["SearchCaches", "SearchFilters", "SearchHit", "SearchRepository"]


class SearchRepository:
    """Vector, full-text and hybrid search over long-term memory."""

    def __init__(
        self,
        session: DbSession,
        ef_search: int = EF_SEARCH_DEFAULT,
        large_namespaces: LargeNamespaces | None = None,
        lexeme_stats: LexemeStats | None = None,
        pgvector: PgvectorVersions | None = None,
        vectors: StoredVectors | None = None,
        table_rows: TableRows | None = None,
    ) -> None:
        self.session = session
        self.ef_search = ef_search
        self.large = large_namespaces if large_namespaces is not None else LargeNamespaces()
        self.lexeme_stats = lexeme_stats if lexeme_stats is not None else LexemeStats()
        self.pgvector = pgvector if pgvector is not None else PgvectorVersions()
        self.vectors = vectors if vectors is not None else StoredVectors()
        # Work bounds (planner.py); tests lower them to reach their branches on small data.
        self.exact_max_rows = EXACT_SEARCH_MAX_ROWS
        self.candidate_budget = FULLTEXT_CANDIDATE_BUDGET
        self.fill_window = FULLTEXT_FILL_WINDOW
        self.eligibility = Eligibility(
            session, self.large, table_rows or TableRows(), self.exact_max_rows
        )

    @classmethod
    def with_caches(
        cls, session: DbSession, ef_search: int, caches: SearchCaches
    ) -> SearchRepository:
        c = caches
        return cls(
            session,
            ef_search,
            c.large_namespaces,
            c.lexeme_stats,
            c.pgvector,
            c.vectors,
            c.table_rows,
        )

    async def _run(self, statement: str, params: dict[str, Any]) -> list[Any]:
        return (await self.session.execute(sql(statement), params)).all()

    # --- what the planner needs to know --------------------------------------------------

    async def pgvector_version(self) -> PgvectorVersion:
        """The installed pgvector extension's version (cached per app)."""
        version = self.pgvector.current()
        if version is None:
            raw = (await self.session.execute(sql(q.PGVECTOR_VERSION))).scalar_one()
            version = parse_pgvector_version(raw)
            self.pgvector.remember(version)
        return version

    async def _hnsw_settings(self, candidates: int) -> dict[str, str]:
        return hnsw_settings(await self.pgvector_version(), candidates, self.ef_search)

    async def _lexeme_frequencies(self) -> LexemeFrequencies | None:
        cached = self.lexeme_stats.current()
        if cached is not None:
            return cached[0]
        row = (await self.session.execute(sql(q.LEXEME_STATS))).one()
        found = lexeme_frequencies(row.rows, row.lexemes, row.freqs, self.lexeme_stats.min_rows)
        self.lexeme_stats.remember(found)
        return found

    # --- vector --------------------------------------------------------------------------

    async def vector(
        self, namespace_id: int, embedding: list[float], filters: SearchFilters, limit: int
    ) -> list[SearchHit]:
        """The `limit` nearest memories by cosine distance; score = similarity (1 - distance).

        HNSW applies the WHERE clause after the graph walk, which yields at most ef_search
        candidates; a selective filter (and namespace scoping and soft deletes are filters
        too) can leave fewer than `limit` of them, and pgvector < 0.8 then silently returns
        a short page. pgvector >= 0.8 walks on (iterative scan, strict order) but still stops
        at hnsw.max_scan_tuples. So whenever the index path returns fewer than `limit` rows,
        the exact query runs: it is planned on the btree filters, and its cost is that of the
        filtered set, which is small exactly when post-filtering starved the index scan.
        Which way runs first is eligibility.py's choice.
        """
        if limit <= 0:
            return []
        route = await self._route(namespace_id, filters, limit)
        if route.count:
            hits, eligible_n = await self._exact_search_counting(
                namespace_id, embedding, filters, limit
            )
            if self.eligibility.small(namespace_id, filters, eligible_n):
                return hits
        if route.exact:
            return await self._vector_hits(namespace_id, embedding, filters, limit, exact=True)
        settings = await self._hnsw_settings(limit)
        hits = await self._vector_hits(namespace_id, embedding, filters, limit, settings=settings)
        if len(hits) < limit:
            hits = await self._vector_hits(namespace_id, embedding, filters, limit, exact=True)
        return hits

    async def _route(self, namespace_id: int, filters: SearchFilters, wanted: int) -> Route:
        version = await self.pgvector_version()
        return await self.eligibility.route(namespace_id, filters, wanted, version, self.ef_search)

    async def _exact_search_counting(
        self, namespace_id: int, embedding: list[float], filters: SearchFilters, limit: int
    ) -> tuple[list[SearchHit], int]:
        """The exact answer, and how many embedded memories pass the filters (counted up to
        the cap), in one pass over them. The answer is empty when they are more than the
        exact-search maximum: then the index is the way."""
        params: dict[str, Any] = {
            "qvec": vector_text(embedding),
            "vec_n": limit,
            "cap": self.exact_max_rows + 1,
            "max_rows": self.exact_max_rows,
        }
        eligible = q.eligible_where(namespace_id, filters, params)
        storage = await self.vectors.storage(self.session)
        rows = await self._run(q.exact_search_with_count(eligible, storage), params)
        return [vector_hit(r) for r in rows if r["id"] is not None], rows[0]["eligible_n"]

    async def _vector_hits(
        self,
        namespace_id: int,
        embedding: list[float],
        filters: SearchFilters,
        limit: int,
        *,
        exact: bool = False,
        settings: dict[str, str] | None = None,
    ) -> list[SearchHit]:
        """The nearest `limit`; `settings` are set (transaction-locally) by the statement."""
        params: dict[str, Any] = {"qvec": vector_text(embedding), "vec_n": limit}
        if settings:
            params.update(q.settings_params(settings))
        eligible = q.eligible_where(namespace_id, filters, params)
        storage = await self.vectors.storage(self.session)
        rows = await self._run(q.vector_search(eligible, exact, bool(settings), storage), params)
        return [vector_hit(row) for row in rows]

    # --- full text -----------------------------------------------------------------------

    async def fulltext(
        self, namespace_id: int, query: str, filters: SearchFilters, limit: int
    ) -> list[SearchHit]:
        """Memories sharing content words with `query`, best first; score = ts_rank.

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
        if limit <= 0:
            return []
        plan = await self._text_plan(namespace_id, query, filters, limit)
        if plan is None:
            return []
        params = q.text_params(plan, limit, self.fill_window)
        eligible = q.eligible_where(namespace_id, filters, params)
        rows = await self._run(q.fulltext_search(eligible, plan), params)
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
        namespace_id: int,
        query: str,
        filters: SearchFilters,
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
        params: dict[str, Any] = {"query": query, "max_lexemes": MAX_QUERY_LEXEMES}
        params.update(q.settings_params(settings or {}))
        # Without a count statement to ride along, the vector count rides here.
        vector_count = ""
        if frequencies is not None and count_vectors:
            params["cap"] = self.exact_max_rows + 1
            eligible = q.eligible_where(namespace_id, filters, params)
            vector_count = f", {q.ready_count(eligible)} AS vector_eligible"
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
                namespace_id, terms, filters, budget, count_vectors
            )
        plan = split_lexemes(terms, matches, budget)
        return dataclasses.replace(plan, vector_eligible=vector_eligible)

    async def _count_lexemes(
        self,
        namespace_id: int,
        terms: list[str],
        filters: SearchFilters,
        budget: int,
        count_vectors: bool,
    ) -> tuple[dict[int, float], int | None]:
        """Each term's matches among the eligible memories, capped at budget + 1 (and the
        capped count of embedded eligible memories, with `count_vectors`)."""
        params: dict[str, Any] = {"df_cap": budget + 1}
        eligible = q.eligible_where(namespace_id, filters, params)
        for i, term in enumerate(terms):
            params[f"t{i}"] = term
        if count_vectors:
            params["cap"] = self.exact_max_rows + 1
        rows = await self._run(q.lexeme_counts(eligible, len(terms), count_vectors), params)
        matches = {i: n for i, n in rows}
        vector_eligible = matches.pop(-1, None)  # the count_vectors row, if asked for
        return matches, vector_eligible

    # --- hybrid --------------------------------------------------------------------------

    async def hybrid(
        self,
        namespace_id: int,
        query: str,
        embedding: list[float] | None,
        filters: SearchFilters,
        limit: int,
        fusion: Fusion | None = None,
        signals: Signals = NO_SIGNALS,
        now: datetime | None = None,
    ) -> list[SearchHit]:
        """The fusion of the vector and full-text rankings (planner.Fusion), blended with
        relevance `signals` (evaluated at `now`), in one statement.

        Each side contributes its top N = hybrid_candidates(limit, fusion) memories, ranked
        1..N. Ties: newest first, then id. Without an embedding only the full-text side runs
        (vector ranks are null). The vector side gets the same guarantee as `vector`: when
        its index scan yields fewer than N candidates, the statement runs again with the
        exact vector CTE.
        """
        if limit <= 0:
            return []
        fusion = fusion or Fusion()
        n = hybrid_candidates(limit, fusion)
        # The HNSW settings ride along with the lexeme look-up: one round trip fewer.
        settings = None if embedding is None else await self._hnsw_settings(n)
        # So does the count that decides between exact and index search, when it is needed.
        route = None if embedding is None else await self._route(namespace_id, filters, n)
        plan = await self._text_plan(
            namespace_id, query, filters, n, settings, count_vectors=bool(route and route.count)
        )
        run = Fused(limit, n, fusion, signals, now or datetime.now(UTC))
        if embedding is None or route is None:  # (route is None exactly when embedding is)
            if plan is None:
                return []
            hits, _ = await self._hybrid_once(namespace_id, None, plan, filters, run, exact=True)
            return hits
        exact = route.exact
        if route.count and plan is not None and plan.vector_eligible is not None:
            exact = exact or self.eligibility.small(namespace_id, filters, plan.vector_eligible)
        elif route.count:
            exact = exact or await self.eligibility.count_is_small(namespace_id, filters)
        hits, vector_found = await self._hybrid_once(
            namespace_id, embedding, plan, filters, run, exact=exact
        )
        if not exact and vector_found < n:
            hits, _ = await self._hybrid_once(
                namespace_id, embedding, plan, filters, run, exact=True
            )
        return hits

    async def _hybrid_once(
        self,
        namespace_id: int,
        embedding: list[float] | None,
        plan: TextPlan | None,
        filters: SearchFilters,
        run: Fused,
        *,
        exact: bool,
    ) -> tuple[list[SearchHit], int]:
        """One fused statement; also returns how many candidates the vector side found."""
        params: dict[str, Any] = {"limit": run.limit}
        params.update(fusion_params(run.fusion))
        params.update(signal_params(run.signals, run.now))
        eligible = q.eligible_where(namespace_id, filters, params)
        if embedding is not None:
            params.update(qvec=vector_text(embedding), vec_n=run.candidates)
        if plan is not None:
            params.update(q.text_params(plan, run.candidates, self.fill_window))
        storage = await self.vectors.storage(self.session)
        statement = q.hybrid_search(
            eligible, plan, embedding is not None, exact, storage, run.fusion, run.signals
        )
        rows = await self._run(statement, params)
        names = SIGNAL_NAMES if run.signals.active else ()
        hits = [hybrid_hit(row, names) for row in rows]
        # No rows at all means neither side found anything: the vector side found 0.
        return hits, (rows[0]["vector_found"] if rows else 0)
