"""Recall's planner, with no database in sight: what it is told of a search (`Facts`, read
once by repository.py's `gather`) and the plan it makes of them (`plan_search` → a
`SearchPlan`, a value): which lists run and how deep, whether exact search or the HNSW index
answers the vector list (`route`) and with which settings (`hnsw_settings`), which question
words select the full-text candidates (`split_lexemes`) and which ranker orders them, how
the lists are fused (the query's `Fusion`). Everything here is a pure function of its
arguments; statements.py renders a plan as SQL, repository.py runs it.

Exact search or the index. A small set is answered exactly, by construction: a count capped
just past EXACT_SEARCH_MAX_ROWS says whether it is small. In an analyzed table of
ESTIMATE_MIN_ROWS or more the planner's estimate (EXPLAIN, statistics only) comes first, and
only a small estimate is counted; a larger one chooses by itself, by what each way is
expected to cost (exact_is_cheaper): an iterative index scan under a selective filter visits
about wanted / selectivity tuples, exact search reads every eligible row. Estimates can be
wrong, and a wrong one costs time only: exact search is exact, and the index path falls back
to it when it comes back short. An unfiltered search in a namespace recently found large
skips all of it (caches.LargeNamespaces)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from app.config import VectorStorage
from app.db.vectors import EF_SEARCH_MAX

if TYPE_CHECKING:
    from app.recall.query import SearchQuery

# pgvector's GUC limits ef_search to [1, EF_SEARCH_MAX]; 40 is its default. A larger ef_search
# finds more of the true nearest neighbours and costs more per walk (bench/README.md has the
# agreement-with-exact figures behind this default). Settings.hnsw_ef_search sets the floor
# per deployment.
EF_SEARCH_DEFAULT = 100
# pgvector >= 0.8: how far an iterative scan may walk the graph before giving up. Past this
# many tuples the exact fallback (btree filters + sort) is the cheaper way to fill the page.
MAX_SCAN_TUPLES = 20_000
ITERATIVE_SCAN_SINCE = (0, 8, 0)
# At most this many eligible rows, exact search is both correct and cheap, so the index is
# skipped. Above it the index runs, with the exact query as the fallback.
EXACT_SEARCH_MAX_ROWS = 2_000
# In a table of at least ESTIMATE_MIN_ROWS, the eligible rows are first estimated by the
# planner (EXPLAIN); only an estimate up to COUNT_BELOW_ESTIMATE is checked by a count, and
# above it the estimate alone chooses between exact search and the index (exact_is_cheaper).
ESTIMATE_MIN_ROWS = 10_000
COUNT_BELOW_ESTIMATE = 4 * EXACT_SEARCH_MAX_ROWS
# What one tuple an HNSW scan visits costs (its neighbours' distances, the index pages it
# reads), in rows read and compared by exact search. At 1,000,000 memories: 9-14 µs against
# 1.2-1.3 µs when the same questions repeat, ~27 µs against ~1.3 µs over the bench's ever
# new questions, whose walks find fewer of their pages in shared_buffers while a filter's
# rows stay there (bench/README.md, "Figures behind the code").
INDEX_TUPLE_COST = 20.0
# Full text uses a query's first this-many distinct content words. Questions have far fewer;
# a pasted paragraph would otherwise cost a count per word and a ts_rank over all of them.
MAX_QUERY_LEXEMES = 32
# Full-text work bounds (see Search.fulltext): the most matches the rare lexemes
# may have, and how many of the newest memories are searched for the common ones.
FULLTEXT_CANDIDATE_BUDGET = 500
FULLTEXT_FILL_WINDOW = 2_000
# PostgreSQL's default selectivity of a text match (tsginidx.c / ts_selfuncs.c).
DEFAULT_TS_MATCH_SEL = 0.005

PgvectorVersion = tuple[int, int, int]


@dataclass(frozen=True)
class TextPlan:
    """Which tsqueries select and rank the full-text candidates (see Search.fulltext)."""

    all_q: str  # every content lexeme of the question, OR-ed: the ranking query
    rare_q: str | None  # the rarest lexemes whose matches fit the candidate budget
    common_q: str | None  # the rest; None when every lexeme is rare enough (exact ranking)


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


def lexeme_frequencies(
    rows: float, lexemes: list[str] | None, freqs: list[float] | None, *, min_rows: float
) -> LexemeFrequencies | None:
    """The statistics ANALYZE keeps on memory.search_tsv as estimates, or None when counting
    is the better way: the table is smaller than `min_rows` (counting is cheap) or has no
    statistics yet."""
    if not lexemes or freqs is None or rows < min_rows:
        return None
    tracked = list(freqs[: len(lexemes)])
    return LexemeFrequencies(
        float(rows),
        dict(zip(lexemes, tracked, strict=True)),
        min(DEFAULT_TS_MATCH_SEL, min(tracked) / 2),
    )


def parse_pgvector_version(raw: str) -> PgvectorVersion:
    """'0.8.0' -> (0, 8, 0); missing parts are 0."""
    nums = [int(p) for p in re.findall(r"\d+", raw)[:3]] + [0, 0, 0]
    return (nums[0], nums[1], nums[2])


def hnsw_settings(
    version: PgvectorVersion, candidates: int, ef_search: int = EF_SEARCH_DEFAULT
) -> dict[str, str]:
    """The transaction-local pgvector settings for an HNSW query wanting `candidates` rows."""
    settings = {"hnsw.ef_search": str(min(max(ef_search, candidates), EF_SEARCH_MAX))}
    if version >= ITERATIVE_SCAN_SINCE:
        settings["hnsw.iterative_scan"] = "relaxed_order"
        settings["hnsw.max_scan_tuples"] = str(MAX_SCAN_TUPLES)
    return settings


@dataclass(frozen=True)
class Route:
    """count: count the eligible rows (capped) first, and search exactly when they are at
    most EXACT_SEARCH_MAX_ROWS; exact: otherwise, exact search (True) or the index (False)."""

    count: bool
    exact: bool


COUNT_THEN_INDEX = Route(count=True, exact=False)
INDEX = Route(count=False, exact=False)


def route(
    estimated: tuple[float, float] | None,
    wanted: int,
    *,
    version: PgvectorVersion,
    ef_search: int = EF_SEARCH_DEFAULT,
) -> Route:
    """How a search for the `wanted` nearest eligible memories runs, given the planner's
    estimate of (eligible rows, the table's rows), or None for a small or never analyzed
    table (counting is cheap there)."""
    if estimated is None:
        return COUNT_THEN_INDEX
    eligible, rows = estimated
    exact = exact_is_cheaper(eligible, rows, wanted, version=version, ef_search=ef_search)
    return Route(count=eligible <= COUNT_BELOW_ESTIMATE, exact=exact)


def exact_search_suffices(eligible_n: int, max_rows: int = EXACT_SEARCH_MAX_ROWS) -> bool:
    """Whether a (capped) count of the embedded memories passing the filters is small enough
    for exact search: correct by construction and cheaper than the index at that size."""
    return eligible_n <= max_rows


def index_scan_tuples(
    eligible: float,
    table_rows: float,
    wanted: int,
    *,
    version: PgvectorVersion,
    ef_search: int = EF_SEARCH_DEFAULT,
) -> float | None:
    """The tuples an HNSW scan is expected to visit to yield `wanted` of `eligible` rows in
    an index over `table_rows`, when where a row lies does not depend on whether it passes
    the filters; None when it is expected to come back short (the exact fallback then runs
    after it). An iterative scan (pgvector >= 0.8) walks on until it has found `wanted`,
    about wanted / selectivity tuples, and gives up past max_scan_tuples; an older one
    post-filters one walk of ef_search candidates."""
    selectivity = min(1.0, max(eligible, 1.0) / max(table_rows, 1.0))
    ef = min(max(ef_search, wanted), EF_SEARCH_MAX)
    if version >= ITERATIVE_SCAN_SINCE:
        visited = max(ef, wanted / selectivity)
        return None if visited > MAX_SCAN_TUPLES else visited
    return float(ef) if selectivity * ef >= wanted else None


def exact_is_cheaper(
    eligible: float,
    table_rows: float,
    wanted: int,
    *,
    version: PgvectorVersion,
    ef_search: int = EF_SEARCH_DEFAULT,
) -> bool:
    """Whether exact search over an estimated `eligible` rows is expected to cost less than
    the index scan for `wanted` of them (index_scan_tuples × INDEX_TUPLE_COST). Either way
    the answer is right: this only chooses the cheaper way to it."""
    visited = index_scan_tuples(eligible, table_rows, wanted, version=version, ef_search=ef_search)
    return visited is None or eligible < INDEX_TUPLE_COST * visited


def split_lexemes(terms: list[str], matches: dict[int, float], budget: int) -> TextPlan:
    """Split the question's terms into rare and common by their match counts (`matches` maps
    a term's index to its count). The rarest terms whose matches together fit in `budget`
    select the candidates; the rest only fill a short page. A term matching nothing stays in
    the ranking query only."""
    rare: list[str] = []
    common: list[str] = []
    total = 0.0
    for i in sorted(matches, key=lambda i: (matches[i], terms[i])):
        if matches[i] == 0:
            continue
        if not common and total + matches[i] <= budget:
            rare.append(terms[i])
            total += matches[i]
        else:
            common.append(terms[i])
    all_q = " | ".join(terms)
    if not common:
        return TextPlan(all_q, None, None)
    return TextPlan(all_q, _or_query(rare), _or_query(common))


def _or_query(terms: list[str]) -> str | None:
    return " | ".join(terms) if terms else None


# --- the plan: what the planner is told, and what it chooses ------------------------------

Strategy = Literal["vector", "fulltext", "hybrid"]
# How the full-text list is ordered (statements.RANKERS has each one's SQL).
Ranker = Literal["ts_rank"]


@dataclass
class Bounds:
    """The deployment's floor for ef_search and the work bounds a plan keeps to (py
    has the figures behind them); tests lower them to reach their branches on small data."""

    ef_search: int = EF_SEARCH_DEFAULT
    exact_max_rows: int = EXACT_SEARCH_MAX_ROWS
    estimate_min_rows: int = ESTIMATE_MIN_ROWS
    candidate_budget: int = FULLTEXT_CANDIDATE_BUDGET
    fill_window: int = FULLTEXT_FILL_WINDOW


@dataclass(frozen=True)
class Lexemes:
    """The question's content words as one-term tsqueries, in order, and each one's matches
    (a term's index → its count): the column statistics' estimate, or, in a table too small
    or not yet analyzed, a count among the eligible memories capped at the budget + 1."""

    terms: list[str]
    matches: dict[int, float]


@dataclass(frozen=True)
class Facts:
    """What the planner needs to know of one search: for a vector list, the embeddings'
    storage, the pgvector version and either that the namespace is known to be large or the
    planner's estimate of (eligible rows, the table's rows); for a full-text list, the
    question's lexemes (None: it has no content words); and for hybrid, when route
    asked for one, the capped count of eligible embedded memories."""

    storage: VectorStorage | None = None
    version: PgvectorVersion | None = None
    known_large: bool = False
    estimate: tuple[float, float] | None = None
    lexemes: Lexemes | None = None
    vector_eligible: int | None = None


@dataclass(frozen=True)
class VectorList:
    """The `depth` nearest: by `route` (first count, capped, and search exactly when at most
    `exact_max_rows` are eligible? then exact search or the index), the index scan with the
    pgvector settings `index`; an index scan that comes back short is followed by exact
    search."""

    depth: int
    route: Route
    index: dict[str, str]
    storage: VectorStorage
    exact_max_rows: int


@dataclass(frozen=True)
class TextList:
    """The top `depth` memories sharing words with the question: `words` say which select
    the candidates and which fill a short page (among the newest `fill_window`), `ranker`
    orders them."""

    depth: int
    words: TextPlan
    fill_window: int
    ranker: Ranker = "ts_rank"


@dataclass(frozen=True)
class SearchPlan:
    """What one search runs: its lists (a strategy's one, or hybrid's two, fused by
    `query.fusion` and blended with `query.signals`). `large`: the namespace proved to hold
    more embedded memories than exact search takes, remembered for unfiltered searches."""

    strategy: Strategy
    query: SearchQuery
    vector: VectorList | None = None
    text: TextList | None = None
    large: bool = False


def depth(query: SearchQuery, strategy: Strategy) -> int:
    """How deep each list is: hybrid's fusion.hybrid_candidates, a single list's limit."""
    return query.candidates if strategy == "hybrid" else query.limit


def wants_vector(query: SearchQuery, strategy: Strategy) -> bool:
    return strategy != "fulltext" and query.vector is not None


def wants_text(strategy: Strategy) -> bool:
    return strategy != "vector"


def route_for(query: SearchQuery, strategy: Strategy, facts: Facts, *, bounds: Bounds) -> Route:
    """`route` for the vector list; an unfiltered search of a namespace known to be
    large goes to the index at once (caches.LargeNamespaces)."""
    if facts.known_large:
        return INDEX
    assert facts.version is not None, "a vector list's facts carry the pgvector version"
    wanted = depth(query, strategy)
    return route(facts.estimate, wanted, version=facts.version, ef_search=bounds.ef_search)


def plan_search(
    query: SearchQuery, strategy: Strategy, facts: Facts, *, bounds: Bounds
) -> SearchPlan | None:
    """The plan, or None when the search can find nothing: a full-text list without content
    words and no vector list beside it."""
    vector, large = _vector_list(query, strategy, facts, bounds=bounds)
    text = _text_list(query, strategy, facts, bounds=bounds)
    if vector is None and text is None:
        return None
    return SearchPlan(strategy, query, vector, text, large and query.filters.unfiltered)


def _vector_list(
    query: SearchQuery, strategy: Strategy, facts: Facts, *, bounds: Bounds
) -> tuple[VectorList | None, bool]:
    """The vector list and whether its facts proved the namespace large. Hybrid's count came
    with the facts, so its route is settled here: exact search or the index."""
    assert strategy != "vector" or query.vector is not None, "a vector search needs a vector"
    if not wants_vector(query, strategy):
        return None, False
    assert facts.version is not None and facts.storage is not None
    chosen = route_for(query, strategy, facts, bounds=bounds)
    large = not facts.known_large and not (chosen.count or chosen.exact)
    if strategy == "hybrid" and chosen.count:
        chosen, large = _counted(facts, chosen, bounds)
    wanted = depth(query, strategy)
    settings = hnsw_settings(facts.version, wanted, bounds.ef_search)
    return VectorList(wanted, chosen, settings, facts.storage, bounds.exact_max_rows), large


def counts_first(chosen: Route, strategy: Strategy) -> bool:
    """Whether hybrid's facts must carry the capped count of eligible embedded memories: a
    route that counts first and is not exact search already."""
    return strategy == "hybrid" and chosen.count and not chosen.exact


def _counted(facts: Facts, chosen: Route, bounds: Bounds) -> tuple[Route, bool]:
    """Hybrid's route once its count is known (exact search when few are eligible), and
    whether the count proved the namespace large."""
    if chosen.exact:
        return Route(count=False, exact=True), False
    assert facts.vector_eligible is not None, "hybrid's count is read with its facts"
    small = exact_search_suffices(facts.vector_eligible, bounds.exact_max_rows)
    return Route(count=False, exact=small), not small


def _text_list(
    query: SearchQuery, strategy: Strategy, facts: Facts, *, bounds: Bounds
) -> TextList | None:
    """The full-text list: the question's rarest words select its candidates
    (split_lexemes; Search.fulltext says why)."""
    if not wants_text(strategy) or facts.lexemes is None:
        return None
    wanted = depth(query, strategy)
    budget = max(bounds.candidate_budget, wanted)
    words = split_lexemes(facts.lexemes.terms, facts.lexemes.matches, budget)
    return TextList(wanted, words, bounds.fill_window)
