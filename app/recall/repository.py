"""The only part of recall that runs a search's SQL, in two calls: `gather` reads what the
planner needs (planner.Facts: the embeddings' storage, the pgvector version, an estimate of
the eligible memories, the question's lexemes with their statistics or counts, a capped
count), each fact from its cache when it holds it; `run` runs a plan's statements
(statements.render) in order until one's answer stands. It decides nothing: planner.py does.
The session is inside the request's transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.config import VectorStorage
from app.db.session import DbSession
from app.db.sql import sql
from app.recall import planner
from app.recall import statements as q
from app.recall.caches import SearchCaches
from app.recall.planner import (
    MAX_QUERY_LEXEMES,
    Bounds,
    Facts,
    LexemeFrequencies,
    Lexemes,
    PgvectorVersion,
    Strategy,
    lexeme_frequencies,
    parse_pgvector_version,
)
from app.recall.query import SearchQuery
from app.recall.statements import Step


class SearchRepository:
    """What a search reads before its plan, and the plan's statements."""

    def __init__(self, session: DbSession, caches: SearchCaches | None = None) -> None:
        self.session = session
        self.caches = caches if caches is not None else SearchCaches()

    async def _rows(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        return (await self.session.execute(sql(statement), params or {})).all()

    # --- run -----------------------------------------------------------------------------

    async def run(self, steps: Sequence[Step]) -> tuple[list[Any], int | None]:
        """The rows of the first step whose answer stands (the last always does), and the
        eligible memories a counting step counted (capped), if one ran."""
        counted: int | None = None
        rows: list[Any] = []
        for step in steps:
            rows = await self._rows(step.sql, step.params)
            if step.stands == "few":
                counted = rows[0]["eligible_n"]
            if step.holds(rows):
                break
        return rows, counted

    # --- gather --------------------------------------------------------------------------

    async def gather(self, query: SearchQuery, strategy: Strategy, bounds: Bounds) -> Facts:
        """What planner.plan_search needs to plan this search, read once."""
        facts = Facts()
        if planner.wants_vector(query, strategy):
            facts = await self._vector_facts(query, bounds)
        if not planner.wants_text(strategy):
            return facts
        count = planner.wants_vector(query, strategy) and planner.counts_first(
            planner.route_for(query, strategy, facts, bounds=bounds), strategy
        )
        wanted = planner.depth(query, strategy)
        lexemes, eligible = await self._lexemes(query, wanted, bounds=bounds, count=count)
        if count and eligible is None:
            eligible = await self._ready_count(query, bounds)
        return replace(facts, lexemes=lexemes, vector_eligible=eligible)

    async def _vector_facts(self, query: SearchQuery, bounds: Bounds) -> Facts:
        """The storage, the version, and the estimate unless the namespace is known large (an
        unfiltered search there goes to the index: caches.LargeNamespaces)."""
        known_large = (
            query.filters.unfiltered and query.namespace_id in self.caches.large_namespaces
        )
        return Facts(
            storage=await self.storage(),
            version=await self.pgvector_version(),
            known_large=known_large,
            estimate=None if known_large else await self._estimate(query, bounds),
        )

    async def storage(self) -> VectorStorage:
        """How embeddings are stored (vector or halfvec: app/db/vectors.py)."""
        return await self.caches.vectors.storage(self.session)

    async def pgvector_version(self) -> PgvectorVersion:
        """The installed pgvector extension's version (cached per app)."""
        version = self.caches.pgvector.current()
        if version is None:
            raw = (await self._rows(q.PGVECTOR_VERSION))[0][0]
            version = parse_pgvector_version(raw)
            self.caches.pgvector.remember(version)
        return version

    async def _estimate(self, query: SearchQuery, bounds: Bounds) -> tuple[float, float] | None:
        """(the embedded memories passing the filters as the planner estimates them, the
        table's rows), or None when the table holds fewer than estimate_min_rows by its
        statistics (or has none yet). Nothing is read but the statistics."""
        rows = self.caches.table_rows.current()
        if rows is None:
            rows = float((await self._rows(q.TABLE_ROWS))[0][0])
            self.caches.table_rows.remember(rows)
        if rows < bounds.estimate_min_rows:
            return None
        plan = (await self._rows(q.estimate(query.where.sql), query.where.params))[0][0]
        if isinstance(plan, str):  # a connection without the json codec
            plan = json.loads(plan)
        return float(plan[0]["Plan"]["Plan Rows"]), rows

    async def _ready_count(self, query: SearchQuery, bounds: Bounds) -> int:
        """The eligible embedded memories, counted up to the cap."""
        params = {**query.where.params, "cap": bounds.exact_max_rows + 1}
        return int((await self._rows(f"SELECT {q.ready_count(query.where.sql)}", params))[0][0])

    async def lexeme_frequencies(self) -> LexemeFrequencies | None:
        """The lexemes' column statistics (caches.LexemeStats), or None: count instead."""
        stats = self.caches.lexeme_stats
        cached = stats.current()
        if cached is not None:
            return cached[0]
        row = (await self._rows(q.LEXEME_STATS))[0]
        found = lexeme_frequencies(row.rows, row.lexemes, row.freqs, stats.min_rows)
        stats.remember(found)
        return found

    async def _lexemes(
        self, query: SearchQuery, wanted: int, *, bounds: Bounds, count: bool
    ) -> tuple[Lexemes | None, int | None]:
        """The question's lexemes with their match counts (None: it has no content words),
        and, with `count`, the capped count of eligible embedded memories riding along.

        The counts are the column statistics' estimates (LexemeStats) when the table is
        large and analyzed; otherwise each lexeme's matches among the eligible memories,
        counted and capped at budget + 1. Estimates are table-wide, so under a filter a word
        may count as common that is rare among the filtered memories: its matches are then
        looked for in the window, which holds every eligible memory when they are few."""
        frequencies = await self.lexeme_frequencies()
        params: dict[str, Any] = {"query": query.text, "max_lexemes": MAX_QUERY_LEXEMES}
        # Without a count statement to ride along, the vector count rides here.
        rides = frequencies is not None and count
        vector_count = ""
        if rides:
            params.update(query.where.params, cap=bounds.exact_max_rows + 1)
            vector_count = f", {q.ready_count(query.where.sql)} AS vector_eligible"
        found = (await self._rows(q.question_lexemes(vector_count), params))[0]
        eligible: int | None = found.vector_eligible if rides else None
        terms: list[str] | None = found.terms
        if not terms:
            return None, eligible
        if frequencies is not None:
            matches = {i: frequencies.matches(x) for i, x in enumerate(found.lexemes)}
            return Lexemes(terms, matches), eligible
        budget = max(bounds.candidate_budget, wanted)
        return await self._count_lexemes(query, terms, budget, bounds=bounds, count=count)

    async def _count_lexemes(
        self, query: SearchQuery, terms: list[str], budget: int, *, bounds: Bounds, count: bool
    ) -> tuple[Lexemes, int | None]:
        """Each term's matches among the eligible memories, capped at budget + 1 (and the
        capped count of embedded eligible memories, with `count`)."""
        params = {**query.where.params, "df_cap": budget + 1}
        params.update({f"t{i}": term for i, term in enumerate(terms)})
        if count:
            params["cap"] = bounds.exact_max_rows + 1
        statement = q.lexeme_counts(query.where.sql, len(terms), count)
        matches = {i: n for i, n in await self._rows(statement, params)}
        eligible = matches.pop(-1, None)  # the count row, if asked for
        return Lexemes(terms, matches), eligible
