"""The SQL of hybrid recall's scoring (planner.Fusion, planner.Signals): each list's share of
the fused score, the relevance signals, and their bind values. statements.hybrid_search puts
them into the statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.recall.planner import Fusion, Signals

SPREAD_EPSILON = 1e-9


def fusion_parts(fusion: Fusion) -> tuple[str, str]:
    """Each list's share of the fused score, as SQL over `joined` (j): its rank, its raw
    score (vec_sim, text_score) or null when the memory is not on that list. Window
    aggregates over `joined` see each list's candidates (aggregates skip nulls)."""
    if fusion.method == "rrf":
        return (
            "CAST(:w_vec AS float8) * coalesce(1::float8 / (:k + j.vector_rank), 0)",
            "CAST(:w_text AS float8) * coalesce(1::float8 / (:k + j.text_rank), 0)",
        )
    parts = []
    for weight, x in (("w_vec", "j.vec_sim"), ("w_text", "j.text_score")):
        lo, hi = f"min({x}) OVER ()", f"max({x}) OVER ()"
        if fusion.normalization == "minmax":
            scaled = f"coalesce(({x} - {lo}) / nullif({hi} - {lo}, 0), 1)"
            norm = f"CASE WHEN {x} IS NULL THEN 0 ELSE {scaled} END"
        else:
            # Below SPREAD_EPSILON a list has no spread: a deviation of rounding noise among
            # nearly equal scores must not blow up into z-scores of ±1.
            spread = f"stddev_pop({x}) OVER ()"
            sd = f"CASE WHEN {spread} > {SPREAD_EPSILON} THEN {spread} END"
            z = f"(coalesce({x}, {lo}) - avg({x}) OVER ()) / {sd}"
            # A memory not on the list counts as the list's lowest; a list with no spread
            # (one candidate, or all equal) contributes 0 to every memory. make eval measured
            # counting its memories as found (1) instead: conversations' recall@10 0.540 → 0.526.
            norm = f"coalesce({z}, 0)"
        parts.append(f"CAST(:{weight} AS float8) * {norm}")
    return parts[0], parts[1]


def fusion_params(fusion: Fusion) -> dict[str, Any]:
    w_vec, w_text = fusion.weights()
    params: dict[str, Any] = {"w_vec": w_vec, "w_text": w_text}
    if fusion.method == "rrf":
        params["k"] = fusion.k
    return params


# Each signal in [0, 1] (planner.Signals), from the memory row and the bind values.
RECENCY = (
    "power(0.5, greatest(extract(epoch FROM CAST(:now AS timestamptz) - m.created_at), 0)"
    " / CAST(:half_life_s AS float8))"
)
IMPORTANCE = "m.importance / 10"
TAG_OVERLAP = """((SELECT count(*) FROM unnest(CAST(:q_tags AS text[])) AS qt(tag)
        WHERE EXISTS (SELECT 1 FROM unnest(m.tags) AS mt(tag)
                      WHERE mt.tag = qt.tag OR left(mt.tag, length(qt.tag) + 1) = qt.tag || ':'))
      ::float8 / cardinality(CAST(:q_tags AS text[])))"""


SIGNAL_NAMES = ("recency", "importance", "tags")


def _active_signals(signals: Signals) -> dict[str, str]:
    """The signals with a weight, by name, as SQL."""
    active = {}
    if signals.recency > 0:
        active["recency"] = RECENCY
    if signals.importance > 0:
        active["importance"] = IMPORTANCE
    if signals.tags > 0 and signals.query_tags:
        active["tags"] = TAG_OVERLAP
    return active


def signal_columns(signals: Signals) -> tuple[str, str]:
    """(the signal columns, the final score) of the hybrid statement's last SELECT."""
    active = _active_signals(signals)
    if not active:
        return "", "f.fused"
    # The fused score scaled so the best candidate's is 1, then blended (planner.Signals).
    relevance = "coalesce(f.fused / nullif(max(f.fused) OVER (), 0), 0)"
    columns = [f"{relevance} AS relevance"]
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
