"""Hybrid recall's fusion, all of it: how its two ranked lists are fused (`Fusion`) and
blended with relevance signals (`Signals`); how deep each list is; a request's options over
the deployment's defaults, checked (422 before anything is touched); the SQL of each list's
share and of the signals, with their bind values (statements.hybrid_search puts them into
the statement); and what a result says of the fusion it used."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from app.config import Settings
from app.db.sql import ACCESS_COUNT, LEARNED_IMPORTANCE
from app.db.vectors import EF_SEARCH_MAX
from app.errors import Unprocessable
from app.recall.schemas import FusionOptions, FusionRead, RecallRequest, SignalOptions

FusionMethod = Literal["rrf", "score"]
Normalization = Literal["minmax", "zscore"]


@dataclass(frozen=True)
class Fusion:
    """How hybrid recall fuses its two ranked lists (fusion_parts has the SQL).

    rrf:   Σ wᵢ / (k + rankᵢ) over the lists a memory is on.
    score: Σ wᵢ · norm(scoreᵢ), wᵢ summing to 1 (a convex combination) of the raw scores
           (vector: 1 − cosine distance; full text: ts_rank) of every candidate of either
           list, a memory one list did not reach scored as that list would score it (its
           similarity, 0 without an embedding; its ts_rank, 0 sharing no word), normalised
           over all the candidates: minmax maps the lowest to 0 and the highest to 1 (all
           equal: 1); zscore is (x − mean) / population standard deviation; a list with no
           spread (one candidate, or all equal) gives every memory 0.
    `candidates` is each list's depth (default: hybrid_candidates).
    `turn_spread`: a conversation turn (metadata `session`) gains this share of the fused score
    of the turn just before it or just after it in its session, the larger, when that turn is
    a candidate too: score += turn_spread · max(0, neighbour's fused) / max(fused) over the
    candidates (turn_spread_sql). A question's words are often in the turn that asked and its
    answer in the reply ("where did you end up parking?" / "level 3, by the lifts"), or the
    other way round."""

    method: FusionMethod = "rrf"
    k: int = 60
    vector_weight: float = 1.0
    fulltext_weight: float = 1.0
    normalization: Normalization = "minmax"
    candidates: int | None = None
    turn_spread: float = 0.0

    def weights(self) -> tuple[float, float]:
        """(vector, full text) as applied: for score fusion, scaled to sum to 1."""
        wv, wt = self.vector_weight, self.fulltext_weight
        if self.method == "score":
            return wv / (wv + wt), wt / (wv + wt)
        return wv, wt


@dataclass(frozen=True)
class Signals:
    """Relevance signals blended into hybrid's fused score, each in [0, 1]:

    recency     0.5 ** (age / half-life), age = now − created_at (0 for the future)
    importance  the learned importance / 10 (the writer's importance until feedback on the
                memory's use moves it: app/memories/learning.py)
    tags        the fraction of `query_tags` the memory carries, itself or a descendant
                (`db` is carried by `db:postgres`)
    access      ln(1 + accesses) / ln(1 + ACCESS_SATURATION), at most 1: how often recalls
                and reads returned it (memory_access.access_count)

    With any weight above 0, score = (1 − Σw) · fused / max(fused) + Σ wᵢ · signalᵢ over the
    candidates (Σw ≤ 1); with none, score = fused."""

    recency: float = 0.0
    half_life_days: float = 7.0
    importance: float = 0.0
    tags: float = 0.0
    query_tags: tuple[str, ...] = ()
    access: float = 0.0

    @property
    def active(self) -> bool:
        return (
            self.recency > 0
            or self.importance > 0
            or self.access > 0
            or (self.tags > 0 and bool(self.query_tags))
        )

    @property
    def total_weight(self) -> float:
        tags = self.tags if self.query_tags else 0.0
        return self.recency + self.importance + tags + self.access


NO_SIGNALS = Signals()


def hybrid_candidates(limit: int, fusion: Fusion | None = None) -> int:
    """How many candidates each side of the hybrid fusion contributes: `fusion.candidates`
    when given, else N = k + 2·limit.

    For equal-weight RRF, a memory missing from both top-N lists scores at most 2/(k+N+1) <
    1/(k+limit), less than the limit-th memory of either list alone scores, so cutting the
    lists at N never loses a memory that belongs in the fused top `limit`. (A memory on one
    list only still misses what it would get from beyond rank N of the other: fusion over
    cut lists.) Capped at ef_search's maximum, but never below `limit`.
    """
    fusion = fusion or Fusion()
    wanted = fusion.candidates if fusion.candidates is not None else fusion.k + 2 * limit
    return max(limit, min(wanted, EF_SEARCH_MAX))


# --- a request's options over the deployment's ------------------------------------------

T = TypeVar("T")


def _pick(given: T | None, default: T) -> T:
    return default if given is None else given


def deployment_fusion(settings: Settings) -> Fusion:
    """The fusion a request that names none gets."""
    return fusion_for(RecallRequest(query="-"), settings)


def fusion_for(req: RecallRequest, settings: Settings) -> Fusion:
    o = req.fusion or FusionOptions()
    fusion = Fusion(
        method=_pick(o.method, settings.recall_fusion),
        k=_pick(o.k, settings.rrf_k),
        vector_weight=_pick(o.vector_weight, settings.recall_vector_weight),
        fulltext_weight=_pick(o.fulltext_weight, settings.recall_fulltext_weight),
        normalization=_pick(o.normalization, settings.recall_normalization),
        candidates=_pick(o.candidates, settings.recall_candidates),
        turn_spread=_pick(o.turn_spread, settings.recall_turn_spread),
    )
    if fusion.vector_weight + fusion.fulltext_weight <= 0:
        raise Unprocessable(
            "fusion weights are both 0: at least one list must count",
            errors=[{"field": "fusion.vector_weight", "message": "both weights are 0"}],
        )
    return fusion


def signals_for(
    req: RecallRequest, settings: Settings, speaker_tags: tuple[str, ...] = ()
) -> Signals:
    """The request's signals over the deployment's. `speaker_tags`: the tags of the speakers
    the question names; with no signals.tags of its own, the tag signal is fed them, weighted
    HTM_RECALL_SPEAKER_WEIGHT (unless the request sets tag_overlap)."""
    if req.strategy != "hybrid":
        return NO_SIGNALS
    o = req.signals or SignalOptions()
    query_tags = tuple(o.tags or ())
    tag_weight = settings.recall_tag_weight
    if not query_tags and speaker_tags:
        query_tags, tag_weight = speaker_tags, settings.recall_speaker_weight
    signals = Signals(
        recency=_pick(o.recency, settings.recall_recency_weight),
        half_life_days=_pick(o.half_life_days, settings.recall_half_life_days),
        importance=_pick(o.importance, settings.recall_importance_weight),
        tags=_pick(o.tag_overlap, tag_weight),
        query_tags=query_tags,
        access=_pick(o.access, settings.recall_access_weight),
    )
    if signals.total_weight > 1:
        raise Unprocessable(
            f"signal weights add up to {signals.total_weight:g}; at most 1",
            errors=[{"field": "signals", "message": "weights add up to more than 1"}],
        )
    return signals


def check_hybrid_only(req: RecallRequest) -> None:
    """Fusion and signals shape hybrid's score; asked of another strategy they are a mistake."""
    if req.strategy == "hybrid":
        return
    for field in ("fusion", "signals"):
        if getattr(req, field) is not None:
            raise Unprocessable(
                f"{field} applies to strategy hybrid only, not {req.strategy}",
                errors=[{"field": field, "message": "hybrid only"}],
            )


def fusion_read(fusion: Fusion, candidates: int) -> FusionRead:
    wv, wt = fusion.weights()
    return FusionRead(
        method=fusion.method,
        k=fusion.k if fusion.method == "rrf" else None,
        vector_weight=wv,
        fulltext_weight=wt,
        normalization=fusion.normalization if fusion.method == "score" else None,
        candidates=candidates,
        turn_spread=fusion.turn_spread,
    )


# --- the SQL --------------------------------------------------------------------------------

SPREAD_EPSILON = 1e-9


# A fusion: each list's share of the fused score, as SQL over `joined` (j): its rank, its raw
# score (vec_sim, text_score) or null when the memory is not on that list. Window aggregates
# over `joined` see each list's candidates (aggregates skip nulls). The fused score is the
# sum of the two shares; FUSIONS holds one function per method.
ShareSql = tuple[str, str]


def rrf(fusion: Fusion) -> ShareSql:
    """Σ wᵢ / (k + rankᵢ) over the lists a memory is on."""
    return (
        "CAST(:w_vec AS float8) * coalesce(1::float8 / (:k + j.vector_rank), 0)",
        "CAST(:w_text AS float8) * coalesce(1::float8 / (:k + j.text_rank), 0)",
    )


def score_fusion(fusion: Fusion) -> ShareSql:
    """Σ wᵢ · norm(scoreᵢ), by `fusion.normalization` (Fusion says how each one reads), over
    every candidate's scores on both lists (vec_all, text_all: statements.scored_union)."""
    norm = fusion.normalization
    return (
        f"CAST(:w_vec AS float8) * {_normalised('j.vec_all', norm)}",
        f"CAST(:w_text AS float8) * {_normalised('j.text_all', norm)}",
    )


def _normalised(x: str, normalization: Normalization) -> str:
    lo, hi = f"min({x}) OVER ()", f"max({x}) OVER ()"
    if normalization == "minmax":
        scaled = f"coalesce(({x} - {lo}) / nullif({hi} - {lo}, 0), 1)"
        return f"CASE WHEN {x} IS NULL THEN 0 ELSE {scaled} END"
    # Below SPREAD_EPSILON a list has no spread: a deviation of rounding noise among
    # nearly equal scores must not blow up into z-scores of ±1.
    spread = f"stddev_pop({x}) OVER ()"
    sd = f"CASE WHEN {spread} > {SPREAD_EPSILON} THEN {spread} END"
    z = f"(coalesce({x}, {lo}) - avg({x}) OVER ()) / {sd}"
    # Every candidate has its score on both lists (scored_union), so the lowest only stands
    # in when a list is absent altogether; a list with no spread (one candidate, or all
    # equal) contributes 0 to every memory.
    return f"coalesce({z}, 0)"


FUSIONS: dict[FusionMethod, Callable[[Fusion], ShareSql]] = {"rrf": rrf, "score": score_fusion}


def fusion_parts(fusion: Fusion) -> ShareSql:
    """Each list's share of the fused score, by the fusion's method (FUSIONS)."""
    return FUSIONS[fusion.method](fusion)


def fusion_params(fusion: Fusion) -> dict[str, Any]:
    w_vec, w_text = fusion.weights()
    params: dict[str, Any] = {"w_vec": w_vec, "w_text": w_text}
    if fusion.method == "rrf":
        params["k"] = fusion.k
    if fusion.turn_spread > 0:
        params["turn_spread"] = fusion.turn_spread
    return params


# A turn's neighbour in its session (the turn just before it, `<` and DESC, or just after it,
# `>` and ASC), by the index memory_session_turns, as the fused candidate it is (or nulls).
_NEIGHBOUR_TURN = """
        LEFT JOIN LATERAL (
            SELECT t.id, t.created_at FROM memory t
            WHERE m.metadata ? 'session' AND t.namespace_id = m.namespace_id
              AND t.metadata ? 'session' AND t.metadata ->> 'session' = m.metadata ->> 'session'
              AND t.deleted_at IS NULL AND (t.created_at, t.id) {op} (m.created_at, m.id)
            ORDER BY t.created_at {order}, t.id {order} LIMIT 1) AS {turn} ON true
        LEFT JOIN fused {cand} ON {cand}.id = {turn}.id AND {cand}.created_at = {turn}.created_at"""


def turn_spread_sql(fusion: Fusion) -> tuple[str, str]:
    """(the joins, the term added to the score) of Fusion.turn_spread, over the hybrid
    statement's `fused` f and its memory row m; nothing when it is 0. A neighbour that is no
    candidate (or a memory that is no turn) adds nothing."""
    if fusion.turn_spread <= 0:
        return "", ""
    joins = _NEIGHBOUR_TURN.format(op="<", order="DESC", turn="tb", cand="fb")
    joins += _NEIGHBOUR_TURN.format(op=">", order="ASC", turn="ta", cand="fa")
    best = "nullif(max(f.fused) OVER (), 0)"
    share = "coalesce(greatest({c}.fused, 0) / {best}, 0)"
    term = (
        f" + CAST(:turn_spread AS float8) * greatest("
        f"{share.format(c='fb', best=best)}, {share.format(c='fa', best=best)})"
    )
    return joins, term


# Each signal in [0, 1] (planner.Signals), from the memory row and the bind values. Recency's
# exponent stops at 1,000 half-lives (0.5^1000 ≈ 1e-301): past about 1,075, float8 underflows
# and PostgreSQL raises instead of answering 0 (a memory of 1900 with a 30-day half-life).
RECENCY = (
    "power(0.5, least(greatest(extract(epoch FROM CAST(:now AS timestamptz) - m.created_at), 0)"
    " / CAST(:half_life_s AS float8), 1000))"
)
IMPORTANCE = f"{LEARNED_IMPORTANCE} / 10"
# Accesses at which the access signal reaches 1.
ACCESS_SATURATION = 100
ACCESS = f"least(1, ln(1 + {ACCESS_COUNT}) / ln(1 + {ACCESS_SATURATION}))"
TAG_OVERLAP = """((SELECT count(*) FROM unnest(CAST(:q_tags AS text[])) AS qt(tag)
        WHERE EXISTS (SELECT 1 FROM unnest(m.tags) AS mt(tag)
                      WHERE mt.tag = qt.tag OR left(mt.tag, length(qt.tag) + 1) = qt.tag || ':'))
      ::float8 / cardinality(CAST(:q_tags AS text[])))"""


SIGNAL_NAMES = ("recency", "importance", "tags", "access")


def _active_signals(signals: Signals) -> dict[str, str]:
    """The signals with a weight, by name, as SQL."""
    active = {}
    if signals.recency > 0:
        active["recency"] = RECENCY
    if signals.importance > 0:
        active["importance"] = IMPORTANCE
    if signals.tags > 0 and signals.query_tags:
        active["tags"] = TAG_OVERLAP
    if signals.access > 0:
        active["access"] = ACCESS
    return active


def signal_columns(signals: Signals) -> tuple[str, str]:
    """(the signal columns, the final score) of the hybrid statement's last SELECT."""
    active = _active_signals(signals)
    if not active:
        return "", "f.fused"
    # The fused score scaled so the best candidate's is 1, then blended (planner.Signals).
    relevance = "coalesce(f.fused / nullif(max(f.fused) OVER (), 0), 0)"
    columns = [f"{relevance} AS scaled"]
    columns += [f"{active.get(name, 'NULL::float8')} AS sig_{name}" for name in SIGNAL_NAMES]
    terms = [f"(1 - CAST(:w_signals AS float8)) * {relevance}"]
    terms += [f"CAST(:w_{name} AS float8) * {sql}" for name, sql in active.items()]
    return ", " + ", ".join(columns), " + ".join(terms)


def signal_params(signals: Signals, now: datetime) -> dict[str, Any]:
    if not signals.active:
        return {}
    active = _active_signals(signals)
    params: dict[str, Any] = {"w_signals": signals.total_weight}
    params.update({f"w_{name}": getattr(signals, name) for name in active})
    if "recency" in active:
        params.update(now=now, half_life_s=signals.half_life_days * 86_400.0)
    if "tags" in active:
        params["q_tags"] = list(signals.query_tags)
    return params
