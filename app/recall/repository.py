"""The only part of recall that runs a search's SQL, in two calls: `gather` reads what the
planner needs (planner.Facts: the embeddings' storage, the pgvector version, an estimate of
the eligible memories, the question's lexemes with their statistics or counts, a capped
count), each fact from its cache when it holds it, by the statements written here; `run`
runs a plan's statements (statements.render) in order until one's answer stands. It decides
nothing: planner.py does. The session is inside the request's transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.config import VectorStorage
from app.db.session import DbSession
from app.db.sql import sql
from app.recall import planner
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
from app.recall.statements import READY, Step

# --- what the planner needs: the statements that read it ------------------------------------

# The same text search configuration as the generated memory.search_tsv column.
TS_CONFIG = "'english'::regconfig"

# A lexeme as a one-term tsquery. Quoting keeps punctuation in lexemes (e-mails, URLs) from
# being read as operators; quotes and backslashes are doubled as tsquery input requires.
# Casting text to tsquery does not normalise, so lexemes are not stemmed a second time.
LEXEME_AS_TSQUERY = r"'''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || ''''"

PGVECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"

# The statistics ANALYZE keeps on memory.search_tsv: the lexemes found in more than a few
# rows, with the fraction of rows holding each, and the table's row estimate. On a
# TimescaleDB hypertable both live on the chunks (inheritance children) as well.
LEXEME_STATS = """
    SELECT greatest(c.reltuples, coalesce(
               (SELECT sum(k.reltuples) FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                WHERE i.inhparent = c.oid AND k.reltuples > 0), 0)) AS rows,
           s.most_common_elems::text::text[] AS lexemes,
           s.most_common_elem_freqs AS freqs
    FROM pg_class c
    LEFT JOIN LATERAL (
        SELECT most_common_elems, most_common_elem_freqs FROM pg_stats
        WHERE schemaname = current_schema() AND tablename = 'memory'
          AND attname = 'search_tsv' AND most_common_elems IS NOT NULL
        ORDER BY inherited DESC LIMIT 1) s ON true
    WHERE c.oid = 'memory'::regclass"""


# memory's rows as ANALYZE estimated them (-1: never analyzed); on TimescaleDB the rows live
# in the chunks (inheritance children).
TABLE_ROWS = """
    SELECT greatest(c.reltuples, coalesce(
               (SELECT sum(k.reltuples) FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                WHERE i.inhparent = c.oid AND k.reltuples > 0), 0)) AS rows
    FROM pg_class c WHERE c.oid = 'memory'::regclass"""


def estimate(eligible: str) -> str:
    """The planner's estimate of the embedded memories passing `eligible` (its plan, as
    JSON: the top node's "Plan Rows"). Nothing is read but the statistics."""
    return f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memory m WHERE {eligible} AND {READY}"


def ready_count(eligible: str) -> str:
    """A scalar subquery: the embedded memories passing `eligible`, counted up to :cap."""
    return f"""(SELECT count(*) FROM (
        SELECT 1 FROM memory m WHERE {eligible} AND {READY} LIMIT :cap) AS e)"""


def question_lexemes(vector_count: str = "") -> str:
    """The question's first :max_lexemes lexemes as one-term tsqueries (in order);
    `vector_count` adds a column to the same row."""
    return f"""
        SELECT array_agg(l.term ORDER BY l.term) AS terms,
               array_agg(l.lexeme ORDER BY l.term) AS lexemes
               {vector_count}
        FROM (SELECT lexeme, {LEXEME_AS_TSQUERY} AS term
              FROM unnest(to_tsvector({TS_CONFIG}, CAST(:query AS text)))
              ORDER BY positions[1], lexeme
              LIMIT :max_lexemes) AS l"""


def lexeme_counts(eligible: str, n_terms: int, count_vectors: bool) -> str:
    """Each term's (:t0, :t1, …) matches among the eligible memories, capped at :df_cap; with
    `count_vectors`, a row i = -1 with the capped count of embedded eligible memories.

    Each lexeme gets its own count subquery with the lexeme as a bind value, so the planner
    sees it and uses the column's lexeme statistics: a common word is counted by a scan that
    stops after the cap, a rare one through the GIN index. A generic plan knows no lexeme and
    would build a GIN bitmap of every match of "go": the engine's connections never use one
    (app/db/engine.py, plan_cache_mode)."""
    counts = [
        f"""
        SELECT {i} AS i, (SELECT count(*) FROM (
            SELECT 1 FROM memory m
            WHERE {eligible} AND m.search_tsv @@ CAST(:t{i} AS tsquery)
            LIMIT :df_cap) AS hit) AS matches"""
        for i in range(n_terms)
    ]
    if count_vectors:
        counts.append(f"SELECT -1 AS i, {ready_count(eligible)} AS matches")
    return " UNION ALL ".join(counts)


def stands(step: Step, rows: list[Any]) -> bool:
    """Whether a step's answer stands (statements.Stands), else the next step runs."""
    if step.stands == "few":
        return bool(rows[0]["eligible_n"] <= step.bound)
    if step.stands == "rows":
        return len(rows) >= step.bound
    if step.stands == "vector_found":
        # No rows at all means neither list found anything: the vector list found 0.
        return (rows[0]["vector_found"] if rows else 0) >= step.bound
    return True


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
            if stands(step, rows):
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
            raw = (await self._rows(PGVECTOR_VERSION))[0][0]
            version = parse_pgvector_version(raw)
            self.caches.pgvector.remember(version)
        return version

    async def _estimate(self, query: SearchQuery, bounds: Bounds) -> tuple[float, float] | None:
        """(the embedded memories passing the filters as the planner estimates them, the
        table's rows), or None when the table holds fewer than estimate_min_rows by its
        statistics (or has none yet). Nothing is read but the statistics."""
        rows = self.caches.table_rows.current()
        if rows is None:
            rows = float((await self._rows(TABLE_ROWS))[0][0])
            self.caches.table_rows.remember(rows)
        if rows < bounds.estimate_min_rows:
            return None
        statement = estimate(query.where.sql)
        plan = (await self._rows(statement, query.where.params))[0][0]
        if isinstance(plan, str):  # a connection without the json codec
            plan = json.loads(plan)
        return float(plan[0]["Plan"]["Plan Rows"]), rows

    async def _ready_count(self, query: SearchQuery, bounds: Bounds) -> int:
        """The eligible embedded memories, counted up to the cap."""
        params = {**query.where.params, "cap": bounds.exact_max_rows + 1}
        statement = f"SELECT {ready_count(query.where.sql)}"
        return int((await self._rows(statement, params))[0][0])

    async def lexeme_frequencies(self) -> LexemeFrequencies | None:
        """The lexemes' column statistics (caches.LexemeStats), or None: count instead."""
        stats = self.caches.lexeme_stats
        cached = stats.current()
        if cached is not None:
            return cached[0]
        row = (await self._rows(LEXEME_STATS))[0]
        found = lexeme_frequencies(row.rows, row.lexemes, row.freqs, min_rows=stats.min_rows)
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
            vector_count = f", {ready_count(query.where.sql)} AS vector_eligible"
        found = (await self._rows(question_lexemes(vector_count), params))[0]
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
        statement = lexeme_counts(query.where.sql, len(terms), count)
        matches = {i: n for i, n in await self._rows(statement, params)}
        eligible = matches.pop(-1, None)  # the count row, if asked for
        return Lexemes(terms, matches), eligible
