"""All recall SQL: vector, full-text and hybrid (RRF) search over long-term memory.

Every query is scoped to one namespace and skips soft-deleted rows; the author's name comes
from a join on robot. Filters are plain predicates on `memory`, so the planner can use the
btree indexes and TimescaleDB can exclude chunks by the `created_at` range.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql, vector_text

# pgvector's GUC limits ef_search to [1, 1000]; 40 is its default. `make bench` measures the
# top 10's agreement with exact search over questions drawn like the memories: at 100,000
# memories 40: 0.965, 100: 0.988, 200: 0.991 (10,000: 0.976 / 0.980 / 0.987). The walk's
# cost grows with ef_search: 100 instead of 200 took the vector statement from ~6.4 to
# ~3.8 ms there. Settings.hnsw_ef_search sets the floor per deployment.
EF_SEARCH_DEFAULT = 100
EF_SEARCH_MAX = 1000
# pgvector >= 0.8: how far an iterative scan may walk the graph before giving up. Past this
# many tuples the exact fallback (btree filters + sort) is the cheaper way to fill the page.
MAX_SCAN_TUPLES = 20_000
# At most this many eligible rows, exact search is both correct and cheap (a few ms), so the
# index is skipped. Above it the index runs, with the exact query as the fallback.
EXACT_SEARCH_MAX_ROWS = 2_000
ITERATIVE_SCAN_SINCE = (0, 8, 0)
# Full text uses a query's first this-many distinct content words. Questions have far fewer;
# a pasted paragraph would otherwise cost a count per word and a ts_rank over all of them.
MAX_QUERY_LEXEMES = 32

# The query vector travels as text (app.db.sql.vector_text) and is cast in SQL.
_QVEC = "CAST(CAST(:qvec AS text) AS vector)"

# The same text search configuration as the generated memory.content_tsv column.
_TS_CONFIG = "'english'::regconfig"

# A lexeme as a one-term tsquery. Quoting keeps punctuation in lexemes (e-mails, URLs) from
# being read as operators; quotes and backslashes are doubled as tsquery input requires.
# Casting text to tsquery does not normalise, so lexemes are not stemmed a second time.
_LEXEME_AS_TSQUERY = r"'''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || ''''"

# Only embedded memories take part in vector search.
_READY = "m.embedding_status = 'ready' AND m.embedding IS NOT NULL"

_HIT_COLUMNS = """
    m.id, m.created_at, m.version, m.key, m.content, m.type, m.importance, m.tags,
    m.metadata, r.name AS author, m.token_count"""

_NO_VECTOR_HITS = """
    SELECT NULL::bigint AS id, NULL::timestamptz AS created_at, NULL::float8 AS distance,
           NULL::bigint AS vector_rank
    WHERE false"""

_NO_TEXT_HITS = """
    SELECT NULL::bigint AS id, NULL::timestamptz AS created_at, NULL::float8 AS text_score,
           NULL::bigint AS text_rank
    WHERE false"""

# set_config(..., is_local => true) is SET LOCAL: it ends with the transaction, so a pooled
# connection never carries one request's scan settings into the next.
_SET_LOCAL = (
    "set_config(name, value, true) "
    "FROM unnest(CAST(:set_names AS text[]), CAST(:set_values AS text[])) AS s(name, value)"
)

_pgvector_version: tuple[int, int, int] | None = None


class LargeNamespaces:
    """Namespaces recently seen holding more than EXACT_SEARCH_MAX_ROWS embedded memories.

    An unfiltered vector search would otherwise count up to that many rows on every request
    (~1.4 ms at 100k memories) only to learn again that the index is the way. Namespaces
    rarely shrink; if one does, the index path's exact fallback still fills the page.
    One per app (Resources), so test apps over different databases never share verdicts.
    """

    def __init__(self, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._until: dict[int, float] = {}

    def __contains__(self, namespace_id: int) -> bool:
        return self._until.get(namespace_id, 0.0) > self.clock()

    def add(self, namespace_id: int) -> None:
        self._until[namespace_id] = self.clock() + self.ttl_s


# The statistics ANALYZE keeps on memory.content_tsv: the lexemes found in more than a few
# rows, with the fraction of rows holding each, and the table's row estimate. On a
# TimescaleDB hypertable both live on the chunks (inheritance children) as well.
_LEXEME_STATS_SQL = """
    SELECT greatest(c.reltuples, coalesce(
               (SELECT sum(k.reltuples) FROM pg_inherits i JOIN pg_class k ON k.oid = i.inhrelid
                WHERE i.inhparent = c.oid AND k.reltuples > 0), 0)) AS rows,
           s.most_common_elems::text::text[] AS lexemes,
           s.most_common_elem_freqs AS freqs
    FROM pg_class c
    LEFT JOIN LATERAL (
        SELECT most_common_elems, most_common_elem_freqs FROM pg_stats
        WHERE schemaname = current_schema() AND tablename = 'memory'
          AND attname = 'content_tsv' AND most_common_elems IS NOT NULL
        ORDER BY inherited DESC LIMIT 1) s ON true
    WHERE c.oid = 'memory'::regclass"""


# PostgreSQL's default selectivity of a text match (tsginidx.c / ts_selfuncs.c).
DEFAULT_TS_MATCH_SEL = 0.005


@dataclass(frozen=True)
class LexemeFrequencies:
    """How many memories hold a lexeme, estimated as PostgreSQL's planner does: the lexeme's
    frequency from the column statistics times the table's rows; a lexeme too rare to be
    tracked gets half the least frequency tracked, at most DEFAULT_TS_MATCH_SEL (the rule of
    tsquery's selectivity estimate)."""

    rows: float
    freq: dict[str, float]
    untracked: float

    def matches(self, lexeme: str) -> float:
        return self.rows * self.freq.get(lexeme, self.untracked)


class LexemeStats:
    """The column statistics of memory.content_tsv, read at most once per TTL per app.

    Full-text search needs to know which question words are rare. Counting each word's
    matches costs a scan per common word that grows with the table (5-9 ms per question at
    100k memories on a 2-core VM, as much as the search itself); ANALYZE (autovacuum) keeps
    the answer already, exactly in a table it reads whole (under 30,000 rows) and to within
    its sample above. Below `min_rows` counting is cheap, and it is used instead (as it is
    when the table has no statistics yet). One per app, like LargeNamespaces.
    """

    def __init__(
        self,
        min_rows: float = 10_000,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_rows = min_rows
        self.ttl_s = ttl_s
        self.clock = clock
        self._read: tuple[float, LexemeFrequencies | None] | None = None

    async def get(self, session: DbSession) -> LexemeFrequencies | None:
        """The frequencies, or None when counting is the better way (small or unanalyzed)."""
        if self._read is None or self._read[0] <= self.clock():
            row = (await session.execute(sql(_LEXEME_STATS_SQL))).one()
            found = None
            if row.lexemes and row.rows >= self.min_rows:
                freqs = list(row.freqs[: len(row.lexemes)])
                found = LexemeFrequencies(
                    float(row.rows),
                    dict(zip(row.lexemes, freqs, strict=True)),
                    min(DEFAULT_TS_MATCH_SEL, min(freqs) / 2),
                )
            self._read = (self.clock() + self.ttl_s, found)
        return self._read[1]


def _settings_params(settings: dict[str, str]) -> dict[str, list[str]]:
    return {"set_names": list(settings), "set_values": list(settings.values())}


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions on the searched memories; None (or an empty list/dict) means "any"."""

    author_robot_id: int | None = None  # scope=self
    types: list[str] | None = None
    tags_any: list[str] | None = None  # memory.tags && tags_any
    tags_all: list[str] | None = None  # memory.tags @> tags_all
    min_importance: float | None = None
    metadata: dict[str, Any] | None = None  # memory.metadata @> metadata (jsonb containment)
    start: datetime | None = None  # created_at >= start
    end: datetime | None = None  # created_at <  end


@dataclass(frozen=True)
class SearchHit:
    id: int
    created_at: datetime
    version: int
    key: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    author: str  # robot.name
    token_count: int
    score: float
    vector_rank: int | None
    vector_similarity: float | None  # 1 - cosine distance
    fulltext_rank: int | None
    fulltext_score: float | None


@dataclass(frozen=True)
class _TextPlan:
    """Which tsqueries select and rank the full-text candidates (see SearchRepository.fulltext)."""

    all_q: str  # every content lexeme of the question, OR-ed: the ranking query
    rare_q: str | None  # the rarest lexemes whose matches fit the candidate budget
    common_q: str | None  # the rest; None when every lexeme is rare enough (exact ranking)
    # Embedded memories passing the filters, capped at EXACT_SEARCH_MAX_ROWS + 1, when
    # hybrid asked for the count to ride along (see SearchRepository._few_eligible).
    vector_eligible: int | None = None


def _or_query(terms: list[str]) -> str | None:
    return " | ".join(terms) if terms else None


def hybrid_candidates(limit: int, rrf_k: int) -> int:
    """How many candidates each side of the hybrid fusion contributes: N = k + 2·limit.

    A memory missing from both top-N lists scores at most 2/(k+N+1) < 1/(k+limit), less
    than the limit-th memory of either list alone scores, so cutting the lists at N never
    loses a memory that belongs in the fused top `limit`. (A memory on one list only still
    misses what it would get from beyond rank N of the other: RRF over cut lists.)
    Capped at ef_search's maximum, but never below `limit`.
    """
    return max(limit, min(rrf_k + 2 * limit, EF_SEARCH_MAX))


def hnsw_settings(
    version: tuple[int, int, int], candidates: int, ef_search: int = EF_SEARCH_DEFAULT
) -> dict[str, str]:
    """The transaction-local pgvector settings for an HNSW query wanting `candidates` rows."""
    settings = {"hnsw.ef_search": str(min(max(ef_search, candidates), EF_SEARCH_MAX))}
    if version >= ITERATIVE_SCAN_SINCE:
        settings["hnsw.iterative_scan"] = "strict_order"
        settings["hnsw.max_scan_tuples"] = str(MAX_SCAN_TUPLES)
    return settings


def _eligible(namespace_id: int, filters: SearchFilters, params: dict[str, Any]) -> str:
    """The WHERE clause shared by every strategy; adds its bind values to `params`."""
    where = ["m.namespace_id = :ns", "m.deleted_at IS NULL"]
    params["ns"] = namespace_id
    if filters.author_robot_id is not None:
        where.append("m.author_robot_id = :f_author")
        params["f_author"] = filters.author_robot_id
    if filters.types:
        where.append("m.type = ANY(CAST(:f_types AS text[]))")
        params["f_types"] = list(filters.types)
    if filters.tags_any:
        where.append("m.tags && CAST(:f_tags_any AS text[])")
        params["f_tags_any"] = list(filters.tags_any)
    if filters.tags_all:
        where.append("m.tags @> CAST(:f_tags_all AS text[])")
        params["f_tags_all"] = list(filters.tags_all)
    if filters.min_importance is not None:
        where.append("m.importance >= :f_min_importance")
        params["f_min_importance"] = float(filters.min_importance)
    if filters.metadata:
        where.append("m.metadata @> CAST(:f_metadata AS jsonb)")
        params["f_metadata"] = json.dumps(filters.metadata)
    # Plain range predicates on the partitioning column: TimescaleDB excludes chunks by them.
    if filters.start is not None:
        where.append("m.created_at >= :f_start")
        params["f_start"] = filters.start
    if filters.end is not None:
        where.append("m.created_at < :f_end")
        params["f_end"] = filters.end
    return " AND ".join(where)


def _ready_count(eligible: str) -> str:
    """A scalar subquery: the embedded memories passing `eligible`, counted up to :cap."""
    return f"""(SELECT count(*) FROM (
        SELECT 1 FROM memory m WHERE {eligible} AND {_READY} LIMIT :cap) AS e)"""


# A condition that sets the transaction-local settings in :set_names / :set_values and is
# true. It has no column in it, so PostgreSQL evaluates it once, before the scan below it
# returns a row (a "One-Time Filter"): pgvector reads its hnsw.* settings at the index
# scan's first row, so they are in effect, and cost no round trip of their own.
_SETTINGS_FIRST = f"(SELECT count(*) FROM (SELECT {_SET_LOCAL}) AS s) >= 0"


def _vector_sql(eligible: str, exact: bool, configure: bool = False) -> str:
    """The `limit :vec_n` nearest ready embeddings: (id, created_at, distance).

    The HNSW index can only serve ORDER BY on the bare `embedding <=> q`; ordering by
    `(embedding <=> q) + 0` hides that expression from it, so the exact variant is planned on
    the btree filters (author, time range, namespace) and sorts the survivors by distance.
    With `configure`, the statement itself sets :set_names / :set_values first.
    """
    order = f"(m.embedding <=> {_QVEC}) + 0, m.id" if exact else f"m.embedding <=> {_QVEC}"
    first = f" AND {_SETTINGS_FIRST}" if configure else ""
    return f"""
        SELECT m.id, m.created_at, m.embedding <=> {_QVEC} AS distance
        FROM memory m
        WHERE {eligible} AND {_READY}{first}
        ORDER BY {order}
        LIMIT :vec_n"""


def _text_ctes(eligible: str, plan: _TextPlan) -> str:
    """CTEs ending in `text_hits(id, created_at, text_score, text_rank)`, the top :text_n."""
    score = "ts_rank(m.content_tsv, CAST(:all_q AS tsquery))"
    if plan.common_q is None:
        # Every lexeme is rare enough: rank all matches, at most the candidate budget.
        candidates = f"""
        text_candidates AS (
            SELECT m.id, m.created_at, {score} AS text_score
            FROM memory m
            WHERE {eligible} AND m.content_tsv @@ CAST(:all_q AS tsquery)
        )"""
    else:
        parts = []
        window_where = eligible
        fill_where = "w.content_tsv @@ CAST(:common_q AS tsquery)"
        if plan.rare_q is not None:
            parts.append(f"""
        text_rare AS MATERIALIZED (
            SELECT m.id, m.created_at, {score} AS text_score
            FROM memory m
            WHERE {eligible} AND m.content_tsv @@ CAST(:rare_q AS tsquery)
        )""")
            # Only when the rare lexemes leave the page short: a one-time filter, so the
            # window is not even read otherwise.
            window_where += " AND (SELECT count(*) FROM text_rare) < :text_n"
            fill_where += " AND NOT (w.content_tsv @@ CAST(:rare_q AS tsquery))"
        # The newest :fill_window eligible memories (an index range read, whatever the
        # words), and among them those matching the common words.
        parts.append(f"""
        text_fill AS (
            SELECT w.id, w.created_at,
                   ts_rank(w.content_tsv, CAST(:all_q AS tsquery)) AS text_score
            FROM (SELECT m.id, m.created_at, m.content_tsv
                  FROM memory m
                  WHERE {window_where}
                  ORDER BY m.created_at DESC
                  LIMIT :fill_window) AS w
            WHERE {fill_where}
        )""")
        union = "SELECT * FROM text_fill"
        if plan.rare_q is not None:
            union = "SELECT * FROM text_rare UNION ALL " + union
        candidates = (
            ",".join(parts)
            + f""",
        text_candidates AS ({union})"""
        )
    return f"""{candidates},
        text_hits AS (
            SELECT id, created_at, text_score,
                   row_number() OVER (ORDER BY text_score DESC, created_at DESC, id) AS text_rank
            FROM text_candidates
            ORDER BY text_rank
            LIMIT :text_n
        )"""


class SearchRepository:
    """Vector, full-text and hybrid search; the session is inside the request's transaction."""

    # Full-text work bounds (see `fulltext`): the most matches the rare lexemes may have, and
    # how many of the newest memories are searched for the common ones.
    FULLTEXT_CANDIDATE_BUDGET = 500
    FULLTEXT_FILL_WINDOW = 2_000

    def __init__(
        self,
        session: DbSession,
        ef_search: int = EF_SEARCH_DEFAULT,
        large_namespaces: LargeNamespaces | None = None,
        lexeme_stats: LexemeStats | None = None,
        pgvector_version: tuple[int, int, int] | None = None,
    ) -> None:
        self.ef_search = ef_search
        self.session = session
        self.large = large_namespaces if large_namespaces is not None else LargeNamespaces()
        self.lexeme_stats = lexeme_stats if lexeme_stats is not None else LexemeStats()
        # Search as that pgvector version would (None: the installed one): tests force the
        # pre-0.8 path on a server that has iterative scans.
        self.forced_pgvector_version = pgvector_version

    # --- pgvector ------------------------------------------------------------------------

    async def pgvector_version(self) -> tuple[int, int, int]:
        """The installed pgvector extension's version, read once per process."""
        if self.forced_pgvector_version is not None:
            return self.forced_pgvector_version
        global _pgvector_version
        if _pgvector_version is None:
            raw = (
                await self.session.execute(
                    sql("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
                )
            ).scalar_one()
            nums = [int(p) for p in re.findall(r"\d+", raw)[:3]] + [0, 0, 0]
            _pgvector_version = (nums[0], nums[1], nums[2])
        return _pgvector_version

    async def _hnsw_settings(self, candidates: int) -> dict[str, str]:
        return hnsw_settings(await self.pgvector_version(), candidates, self.ef_search)

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
        """
        if limit <= 0:
            return []
        if not self._known_large(namespace_id, filters):
            hits, eligible_n = await self._exact_if_few(namespace_id, embedding, filters, limit)
            if self._few(namespace_id, filters, eligible_n):
                return hits
        settings = await self._hnsw_settings(limit)
        hits = await self._vector_hits(
            namespace_id, embedding, filters, limit, exact=False, settings=settings
        )
        if len(hits) < limit:
            hits = await self._vector_hits(namespace_id, embedding, filters, limit, exact=True)
        return hits

    async def _exact_if_few(
        self, namespace_id: int, embedding: list[float], filters: SearchFilters, limit: int
    ) -> tuple[list[SearchHit], int]:
        """The exact answer, and how many embedded memories pass the filters (counted up to
        EXACT_SEARCH_MAX_ROWS + 1), in one pass over them. The answer is empty when they are
        more than that: then the index is the way (see _few_eligible)."""
        params: dict[str, Any] = {
            "qvec": vector_text(embedding),
            "vec_n": limit,
            "cap": EXACT_SEARCH_MAX_ROWS + 1,
            "max_rows": EXACT_SEARCH_MAX_ROWS,
        }
        eligible = _eligible(namespace_id, filters, params)
        statement = f"""
            WITH eligible AS MATERIALIZED (
                SELECT m.id, m.created_at, m.embedding <=> {_QVEC} AS distance
                FROM memory m
                WHERE {eligible} AND {_READY}
                LIMIT :cap
            ), counted AS (
                SELECT count(*) AS n FROM eligible
            ), nearest AS (
                SELECT id, created_at, distance FROM eligible
                WHERE (SELECT n FROM counted) <= :max_rows
                ORDER BY distance, id
                LIMIT :vec_n
            ), hits AS (
                SELECT {_HIT_COLUMNS}, n.distance,
                       row_number() OVER (ORDER BY n.distance, n.id) AS vector_rank
                FROM nearest n
                JOIN memory m ON m.id = n.id AND m.created_at = n.created_at
                JOIN robot r ON r.id = m.author_robot_id
            )
            SELECT c.n AS eligible_n, h.*
            FROM counted c LEFT JOIN hits h ON true
            ORDER BY h.vector_rank"""
        rows = (await self.session.execute(sql(statement), params)).mappings().all()
        return [_vector_hit(r) for r in rows if r["id"] is not None], rows[0]["eligible_n"]

    async def _few_eligible(self, namespace_id: int, filters: SearchFilters) -> bool:
        """Whether at most EXACT_SEARCH_MAX_ROWS embedded memories pass the filters.

        Post-filtered HNSW can also come back with a full page that is not the nearest one:
        on TimescaleDB each chunk's index yields its own ef_search candidates, so a one-week
        filter over two chunks fills the page from a few hundred rows approximately. When the
        filtered set is this small, exact search is cheap, so it is used outright. The count
        stops at the cap, so it costs little when the set is large.
        """
        if self._known_large(namespace_id, filters):
            return False
        params: dict[str, Any] = {"cap": EXACT_SEARCH_MAX_ROWS + 1}
        eligible = _eligible(namespace_id, filters, params)
        statement = sql(f"SELECT {_ready_count(eligible)}")
        n = (await self.session.execute(statement, params)).scalar_one()
        return self._few(namespace_id, filters, n)

    def _known_large(self, namespace_id: int, filters: SearchFilters) -> bool:
        """An unfiltered search in a namespace recently counted as too large for exact search."""
        return filters == SearchFilters() and namespace_id in self.large

    def _few(self, namespace_id: int, filters: SearchFilters, eligible_n: int) -> bool:
        """Whether a capped eligibility count means exact search; remembers a large namespace."""
        if eligible_n <= EXACT_SEARCH_MAX_ROWS:
            return True
        if filters == SearchFilters():
            self.large.add(namespace_id)
        return False

    async def _vector_hits(
        self,
        namespace_id: int,
        embedding: list[float],
        filters: SearchFilters,
        limit: int,
        *,
        exact: bool,
        settings: dict[str, str] | None = None,
    ) -> list[SearchHit]:
        """The nearest `limit`; `settings` are set (transaction-locally) by the statement."""
        params: dict[str, Any] = {"qvec": vector_text(embedding), "vec_n": limit}
        if settings:
            params.update(_settings_params(settings))
        eligible = _eligible(namespace_id, filters, params)
        statement = f"""
            WITH nearest AS MATERIALIZED ({_vector_sql(eligible, exact, bool(settings))})
            SELECT {_HIT_COLUMNS}, n.distance,
                   row_number() OVER (ORDER BY n.distance, n.id) AS vector_rank
            FROM nearest n
            JOIN memory m ON m.id = n.id AND m.created_at = n.created_at
            JOIN robot r ON r.id = m.author_robot_id
            ORDER BY vector_rank"""
        rows = (await self.session.execute(sql(statement), params)).mappings().all()
        return [_vector_hit(row) for row in rows]

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
        reading and scoring every match: at 100k memories that is ~0.3 s per question.
        So each lexeme's matches are estimated from the column statistics ANALYZE keeps
        (LexemeStats), or, in a table too small or not yet analyzed, counted among the
        eligible memories, each count capped at B+1 (B = FULLTEXT_CANDIDATE_BUDGET; planned
        per lexeme, a common word is counted by a scan that stops after B+1 matches, a rare
        one through the GIN index). The rarest lexemes whose matches together fit in B (the
        informative words: names, topics) select the candidates. Memories matching only the
        remaining common words are considered only when the rare ones leave the page short,
        and then only among the newest W eligible memories (W = FULLTEXT_FILL_WINDOW, read
        in created_at order through the btree, whatever their words). All candidates are
        ranked by the full OR query; when every lexeme fits in B this is exactly the
        unbounded ranking.
        The trade-off is an IDF-like prior that ts_rank lacks: a memory sharing only common
        words with the question can no longer outrank one sharing a rare word, and when the
        page must be filled with common-word matches, older ones outside the window are not
        scored. In exchange about B + W rows are read and ranked, whatever the namespace's
        size (measured at 100k memories with B = 500, W = 2,000: ~3-4 ms for the window,
        instead of ~360 ms unbounded; counting the words cost another 5-9 ms there).
        A question's first MAX_QUERY_LEXEMES content words are used, the rest ignored.
        """
        if limit <= 0:
            return []
        plan = await self._text_plan(namespace_id, query, filters, limit)
        if plan is None:
            return []
        params = self._text_params(plan, limit)
        eligible = _eligible(namespace_id, filters, params)
        statement = f"""
            WITH {_text_ctes(eligible, plan).lstrip()}
            SELECT {_HIT_COLUMNS}, t.text_score, t.text_rank
            FROM text_hits t
            JOIN memory m ON m.id = t.id AND m.created_at = t.created_at
            JOIN robot r ON r.id = m.author_robot_id
            ORDER BY t.text_rank"""
        rows = (await self.session.execute(sql(statement), params)).mappings().all()
        return [
            _hit(
                row,
                score=row["text_score"],
                fulltext_rank=row["text_rank"],
                fulltext_score=row["text_score"],
            )
            for row in rows
        ]

    def _text_params(self, plan: _TextPlan, wanted: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "all_q": plan.all_q,
            "text_n": wanted,
        }
        if plan.rare_q is not None:
            params["rare_q"] = plan.rare_q
        if plan.common_q is not None:
            params["common_q"] = plan.common_q
            params["fill_window"] = max(self.FULLTEXT_FILL_WINDOW, wanted)
        return params

    async def _text_plan(
        self,
        namespace_id: int,
        query: str,
        filters: SearchFilters,
        wanted: int,
        settings: dict[str, str] | None = None,
        count_vectors: bool = False,
    ) -> _TextPlan | None:
        """Split the question's lexemes into rare and common by their match counts.

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
        settings = settings or {}
        frequencies = await self.lexeme_stats.get(self.session)
        budget = max(self.FULLTEXT_CANDIDATE_BUDGET, wanted)
        params: dict[str, Any] = {"query": query, "max_lexemes": MAX_QUERY_LEXEMES}
        params.update(_settings_params(settings))
        # Without a count statement to ride along, the vector count rides here.
        vector_count = ""
        if frequencies is not None and count_vectors:
            params["cap"] = EXACT_SEARCH_MAX_ROWS + 1
            eligible = _eligible(namespace_id, filters, params)
            vector_count = f", {_ready_count(eligible)} AS vector_eligible"
        found = (
            await self.session.execute(
                sql(f"""
                    SELECT array_agg(l.term ORDER BY l.term) AS terms,
                           array_agg(l.lexeme ORDER BY l.term) AS lexemes,
                           (SELECT count(*) FROM (SELECT {_SET_LOCAL}) AS s) AS configured
                           {vector_count}
                    FROM (SELECT lexeme, {_LEXEME_AS_TSQUERY} AS term
                          FROM unnest(to_tsvector({_TS_CONFIG}, CAST(:query AS text)))
                          ORDER BY positions[1], lexeme
                          LIMIT :max_lexemes) AS l"""),
                params,
            )
        ).one()
        terms: list[str] | None = found.terms
        if not terms:
            return None
        vector_eligible: int | None = None
        if frequencies is not None:
            matches: dict[int, float] = {
                i: frequencies.matches(lexeme) for i, lexeme in enumerate(found.lexemes)
            }
            if count_vectors:
                vector_eligible = found.vector_eligible
        else:
            matches, vector_eligible = await self._count_lexemes(
                namespace_id, terms, filters, budget, count_vectors
            )

        rare: list[str] = []
        common: list[str] = []
        total = 0.0
        for i in sorted(matches, key=lambda i: (matches[i], terms[i])):
            if matches[i] == 0:
                continue  # matches nothing eligible; stays in the ranking query only
            if not common and total + matches[i] <= budget:
                rare.append(terms[i])
                total += matches[i]
            else:
                common.append(terms[i])
        all_q = " | ".join(terms)
        if not common:
            return _TextPlan(all_q, None, None, vector_eligible)
        return _TextPlan(all_q, _or_query(rare), _or_query(common), vector_eligible)

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
        # Each lexeme gets its own count subquery with the lexeme as a bind value, so the
        # planner sees it and uses the column's lexeme statistics: a common word is counted
        # by a scan that stops after budget+1 matches, a rare one through the GIN index.
        # A generic plan knows no lexeme and would build a GIN bitmap of every match of
        # "go": the engine's connections never use one (app/db/engine.py, plan_cache_mode).
        params: dict[str, Any] = {"df_cap": budget + 1}
        eligible = _eligible(namespace_id, filters, params)
        counts = []
        for i, term in enumerate(terms):
            params[f"t{i}"] = term
            counts.append(f"""
                SELECT {i} AS i, (SELECT count(*) FROM (
                    SELECT 1 FROM memory m
                    WHERE {eligible} AND m.content_tsv @@ CAST(:t{i} AS tsquery)
                    LIMIT :df_cap) AS hit) AS matches""")
        if count_vectors:
            params["cap"] = EXACT_SEARCH_MAX_ROWS + 1
            counts.append(f"SELECT -1 AS i, {_ready_count(eligible)} AS matches")
        rows = (await self.session.execute(sql(" UNION ALL ".join(counts)), params)).all()
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
        rrf_k: int = 60,
    ) -> list[SearchHit]:
        """Reciprocal Rank Fusion of the vector and full-text rankings, in one statement.

        Each side contributes its top N = hybrid_candidates(limit, rrf_k) memories, ranked
        1..N; a memory scores Σ 1/(rrf_k + rank) over the sides it appears in. Ties: newest
        first, then id. Without an embedding only the full-text side runs (vector ranks are
        null). The vector side gets the same guarantee as `vector`: when its index scan
        yields fewer than N candidates, the statement runs again with the exact vector CTE.
        """
        if limit <= 0:
            return []
        n = hybrid_candidates(limit, rrf_k)
        # The HNSW settings ride along with the lexeme look-up: one round trip fewer.
        settings = None if embedding is None else await self._hnsw_settings(n)
        # So does the count that decides between exact and index search, when it is needed.
        count_vectors = embedding is not None and not self._known_large(namespace_id, filters)
        plan = await self._text_plan(
            namespace_id, query, filters, n, settings, count_vectors=count_vectors
        )
        if embedding is None:
            if plan is None:
                return []
            hits, _ = await self._hybrid_once(
                namespace_id, None, plan, filters, limit, rrf_k, n, exact=True
            )
            return hits
        if plan is not None and plan.vector_eligible is not None:
            exact = self._few(namespace_id, filters, plan.vector_eligible)
        else:
            exact = await self._few_eligible(namespace_id, filters)
        hits, vector_found = await self._hybrid_once(
            namespace_id, embedding, plan, filters, limit, rrf_k, n, exact=exact
        )
        if not exact and vector_found < n:
            hits, _ = await self._hybrid_once(
                namespace_id, embedding, plan, filters, limit, rrf_k, n, exact=True
            )
        return hits

    async def _hybrid_once(
        self,
        namespace_id: int,
        embedding: list[float] | None,
        plan: _TextPlan | None,
        filters: SearchFilters,
        limit: int,
        rrf_k: int,
        n: int,
        *,
        exact: bool,
    ) -> tuple[list[SearchHit], int]:
        """One fused statement; also returns how many candidates the vector side found."""
        params: dict[str, Any] = {"limit": limit, "k": rrf_k}
        eligible = _eligible(namespace_id, filters, params)
        ctes = []
        if embedding is not None:
            params.update(qvec=vector_text(embedding), vec_n=n)
            ctes.append(f"""
        vec AS MATERIALIZED ({_vector_sql(eligible, exact)}),
        vec_hits AS (
            SELECT id, created_at, distance,
                   row_number() OVER (ORDER BY distance, id) AS vector_rank
            FROM vec
        )""")
        else:
            ctes.append(f"""
        vec AS ({_NO_VECTOR_HITS}),
        vec_hits AS (SELECT * FROM vec)""")
        if plan is not None:
            params.update(self._text_params(plan, n))
            ctes.append(_text_ctes(eligible, plan))
        else:
            ctes.append(f"""
        text_hits AS ({_NO_TEXT_HITS})""")
        # float8 arithmetic: 1.0 alone is numeric, and the driver would return Decimals.
        statement = f"""
            WITH {",".join(ctes).lstrip()},
            fused AS (
                SELECT coalesce(v.id, t.id) AS id,
                       coalesce(v.created_at, t.created_at) AS created_at,
                       v.vector_rank, v.distance, t.text_rank, t.text_score,
                       coalesce(1::float8 / (:k + v.vector_rank), 0)
                         + coalesce(1::float8 / (:k + t.text_rank), 0) AS rrf
                FROM vec_hits v
                FULL OUTER JOIN text_hits t ON t.id = v.id AND t.created_at = v.created_at
            )
            SELECT {_HIT_COLUMNS}, f.rrf, f.vector_rank, f.distance, f.text_rank, f.text_score,
                   (SELECT count(*) FROM vec) AS vector_found
            FROM fused f
            JOIN memory m ON m.id = f.id AND m.created_at = f.created_at
            JOIN robot r ON r.id = m.author_robot_id
            ORDER BY f.rrf DESC, m.created_at DESC, m.id
            LIMIT :limit"""
        rows = (await self.session.execute(sql(statement), params)).mappings().all()
        hits = [
            _hit(
                row,
                score=row["rrf"],
                vector_rank=row["vector_rank"],
                vector_similarity=None if row["distance"] is None else _similarity(row["distance"]),
                fulltext_rank=row["text_rank"],
                fulltext_score=row["text_score"],
            )
            for row in rows
        ]
        # No rows at all means neither side found anything: the vector side found 0.
        return hits, (rows[0]["vector_found"] if rows else 0)


def _hit(
    row: Any,
    *,
    score: float,
    vector_rank: int | None = None,
    vector_similarity: float | None = None,
    fulltext_rank: int | None = None,
    fulltext_score: float | None = None,
) -> SearchHit:
    return SearchHit(
        id=row["id"],
        created_at=row["created_at"],
        version=row["version"],
        key=row["key"],
        content=row["content"],
        type=row["type"],
        importance=row["importance"],
        tags=list(row["tags"]),
        metadata=row["metadata"],
        author=row["author"],
        token_count=row["token_count"],
        score=float(score),
        vector_rank=vector_rank,
        vector_similarity=vector_similarity,
        fulltext_rank=fulltext_rank,
        fulltext_score=fulltext_score,
    )


def _similarity(distance: float) -> float:
    """1 - cosine distance. A zero-length stored vector (a provider can return one) has a NaN
    distance to everything; it counts as unrelated, 0.0 (PostgreSQL sorts NaN last, so it
    also ranks last), since NaN is not a JSON number."""
    return 0.0 if math.isnan(distance) else 1.0 - distance


def _vector_hit(row: Any) -> SearchHit:
    """A hit of a vector-only search: scored by similarity (1 - cosine distance)."""
    similarity = _similarity(row["distance"])
    return _hit(row, score=similarity, vector_rank=row["vector_rank"], vector_similarity=similarity)
