"""A search's plan, as a value. What the planner is told (`Facts`: read once, caches first, by
SearchRepository.gather) and what it chooses (`SearchPlan`): which lists run and how deep,
which way the vector list is searched (exact, or the HNSW index with which settings), which
words select the full-text list and which ranker orders it, how the lists are fused.
statements.render turns a plan into its statements and SearchRepository.run runs them:
nothing after `plan_search` decides anything. The choices are planner.py's pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.config import VectorStorage
from app.recall import planner
from app.recall.planner import (
    EF_SEARCH_DEFAULT,
    ESTIMATE_MIN_ROWS,
    EXACT_SEARCH_MAX_ROWS,
    FULLTEXT_CANDIDATE_BUDGET,
    FULLTEXT_FILL_WINDOW,
    INDEX,
    PgvectorVersion,
    Route,
    TextPlan,
)
from app.recall.query import SearchQuery

Strategy = Literal["vector", "fulltext", "hybrid"]
# How the full-text list is ordered (statements.RANKERS has each one's SQL).
Ranker = Literal["ts_rank"]


@dataclass
class Bounds:
    """The deployment's floor for ef_search and the work bounds a plan keeps to (planner.py
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
    question's lexemes (None: it has no content words); and for hybrid, when planner.route
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


def route(query: SearchQuery, strategy: Strategy, facts: Facts, bounds: Bounds) -> Route:
    """planner.route for the vector list; an unfiltered search of a namespace known to be
    large goes to the index at once (caches.LargeNamespaces)."""
    if facts.known_large:
        return INDEX
    assert facts.version is not None, "a vector list's facts carry the pgvector version"
    wanted = depth(query, strategy)
    return planner.route(facts.estimate, wanted, facts.version, bounds.ef_search)


def plan_search(
    query: SearchQuery, strategy: Strategy, facts: Facts, bounds: Bounds
) -> SearchPlan | None:
    """The plan, or None when the search can find nothing: a full-text list without content
    words and no vector list beside it."""
    vector, large = _vector_list(query, strategy, facts, bounds)
    text = _text_list(query, strategy, facts, bounds)
    if vector is None and text is None:
        return None
    return SearchPlan(strategy, query, vector, text, large and query.filters.unfiltered)


def _vector_list(
    query: SearchQuery, strategy: Strategy, facts: Facts, bounds: Bounds
) -> tuple[VectorList | None, bool]:
    """The vector list and whether its facts proved the namespace large. Hybrid's count came
    with the facts, so its route is settled here: exact search or the index."""
    assert strategy != "vector" or query.vector is not None, "a vector search needs a vector"
    if not wants_vector(query, strategy):
        return None, False
    assert facts.version is not None and facts.storage is not None
    chosen = route(query, strategy, facts, bounds)
    large = not facts.known_large and not (chosen.count or chosen.exact)
    if strategy == "hybrid" and chosen.count:
        chosen, large = _counted(facts, chosen, bounds)
    wanted = depth(query, strategy)
    settings = planner.hnsw_settings(facts.version, wanted, bounds.ef_search)
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
    small = planner.exact_search_suffices(facts.vector_eligible, bounds.exact_max_rows)
    return Route(count=False, exact=small), not small


def _text_list(
    query: SearchQuery, strategy: Strategy, facts: Facts, bounds: Bounds
) -> TextList | None:
    """The full-text list: the question's rarest words select its candidates
    (planner.split_lexemes; Search.fulltext says why)."""
    if not wants_text(strategy) or facts.lexemes is None:
        return None
    wanted = depth(query, strategy)
    budget = max(bounds.candidate_budget, wanted)
    words = planner.split_lexemes(facts.lexemes.terms, facts.lexemes.matches, budget)
    return TextList(wanted, words, bounds.fill_window)
