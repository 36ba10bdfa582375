"""Recall@k, MRR and latency over ranked keys, per kind and split, and how a floor on the
hits' scores would cut them: plain arithmetic."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


def recall_at(ranked: Sequence[str], evidence: Iterable[str], k: int) -> float:
    """The fraction of the evidence found in the first k ranked keys."""
    wanted = set(evidence)
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def reciprocal_rank(ranked: Sequence[str], evidence: Iterable[str]) -> float:
    """1 / the rank of the first evidence key in the list, 0 when none is in it."""
    wanted = set(evidence)
    for i, key in enumerate(ranked):
        if key in wanted:
            return 1.0 / (i + 1)
    return 0.0


def stale_above(o: Outcome) -> bool:
    """The earlier value's memory ranks above the current one's (or comes back without
    it): the answer a memory without supersede gives wrong."""
    ranks = {key: i for i, key in enumerate(o.ranked)}
    stale = min((ranks[k] for k in o.stale if k in ranks), default=None)
    current = min((ranks[k] for k in o.evidence if k in ranks), default=None)
    return stale is not None and (current is None or stale < current)


@dataclass(frozen=True)
class Outcome:
    kind: str
    split: str
    evidence: tuple[str, ...]
    ranked: tuple[str, ...]
    latency_s: float
    scores: tuple[float, ...] = ()  # each ranked hit's `score`
    # each ranked hit's `vector_similarity` (None: not on the vector list)
    similarities: tuple[float | None, ...] = ()
    # the ranked hits with the neighbouring turns the service returned with each (in order,
    # without repeats); None when the response carried no neighbours
    expanded: tuple[str, ...] | None = None
    # each ranked hit's `relevance`, what `min_score` compares (None: no vector)
    relevances: tuple[float | None, ...] = ()
    changed: str | None = None  # EvalQuestion.changed
    stale: tuple[str, ...] = ()  # EvalQuestion.stale
    deep: tuple[str, ...] | None = None  # the keys of the same question asked with limit 20


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    n = len(outcomes)
    if n == 0:
        return {"questions": 0}
    out = {
        "questions": n,
        "recall_at_1": sum(recall_at(o.ranked, o.evidence, 1) for o in outcomes) / n,
        "recall_at_5": sum(recall_at(o.ranked, o.evidence, 5) for o in outcomes) / n,
        "recall_at_10": sum(recall_at(o.ranked, o.evidence, 10) for o in outcomes) / n,
        "mrr": sum(reciprocal_rank(o.ranked, o.evidence) for o in outcomes) / n,
        "p50_ms": 1000.0 * statistics.median(o.latency_s for o in outcomes),
    }
    deep = [o for o in outcomes if o.deep is not None]
    if deep:
        out["recall_at_20"] = sum(recall_at(o.deep or (), o.evidence, 20) for o in deep) / len(deep)
        # the limit-20 answer's top 10 is the limit-10 answer (hybrid's depth follows the limit)
        out["same_top_10"] = sum(1 for o in deep if (o.deep or ())[:10] == o.ranked) / len(deep)
    if any(o.expanded is not None for o in outcomes):
        # the evidence among the hits and the neighbours returned with them (all of them: a
        # top-10 recall with n neighbours a side returns up to 10·(2n + 1) turns)
        out["recall_with_neighbours"] = (
            sum(
                recall_at(o.expanded or o.ranked, o.evidence, len(o.expanded or o.ranked) or 1)
                for o in outcomes
            )
            / n
        )
    return out


FLOORS = tuple(round(0.05 * i, 2) for i in range(19))  # 0.0, 0.05, ..., 0.9
KEEP = 0.95


def floors(
    outcomes: Sequence[Outcome], grid: Sequence[float] = FLOORS, on: str = "scores"
) -> dict[str, Any]:
    """What a floor on the returned `score` (`on="relevances"`: on the hits' `relevance`, what
    `min_score` compares; `on="similarities"`: on their `vector_similarity`; hits without a
    value left out) would have done to these hits: for each
    floor, the fraction of evidence hits kept (score ≥ floor) and of non-evidence hits
    dropped (score < floor); and `floor_95`, the highest floor of the grid keeping at least
    95 % of the evidence hits (None when there is none, or no scores)."""
    evidence: list[float] = []
    other: list[float] = []
    for o in outcomes:
        wanted = set(o.evidence)
        for key, score in zip(o.ranked, getattr(o, on), strict=False):
            if score is not None:
                (evidence if key in wanted else other).append(score)
    rows = []
    for f in grid:
        kept = sum(1 for s in evidence if s >= f) / len(evidence) if evidence else None
        dropped = sum(1 for s in other if s < f) / len(other) if other else None
        rows.append({"floor": f, "evidence_kept": kept, "non_evidence_dropped": dropped})
    ok = [r["floor"] for r in rows if r["evidence_kept"] is not None and r["evidence_kept"] >= KEEP]
    return {
        "evidence_hits": len(evidence),
        "non_evidence_hits": len(other),
        "evidence_score_p10": _quantile(evidence, 0.1),
        "non_evidence_score_p50": _quantile(other, 0.5),
        "grid": rows,
        "floor_95": max(ok) if ok else None,
    }


def _quantile(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def breakdown(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Overall, per split, per kind, and per kind within each split."""
    out: dict[str, Any] = {"all": summary(outcomes), "split": {}, "kind": {}, "split_kind": {}}
    for split in sorted({o.split for o in outcomes}):
        in_split = [o for o in outcomes if o.split == split]
        out["split"][split] = summary(in_split)
        out["split_kind"][split] = {
            kind: summary([o for o in in_split if o.kind == kind])
            for kind in sorted({o.kind for o in in_split})
        }
    for kind in sorted({o.kind for o in outcomes}):
        out["kind"][kind] = summary([o for o in outcomes if o.kind == kind])
    changed = sorted({o.changed for o in outcomes if o.changed is not None})
    if changed:
        out["changed"] = {c: summary([o for o in outcomes if o.changed == c]) for c in changed}
        current = [o for o in outcomes if o.changed == "current" and o.stale]
        if current:
            out["changed"]["current"]["stale_above"] = sum(map(stale_above, current)) / len(current)
    out["floors"] = floors(outcomes)
    if any(x is not None for o in outcomes for x in o.relevances):
        out["relevance_floors"] = floors(outcomes, on="relevances")
    if any(x is not None for o in outcomes for x in o.similarities):
        out["similarity_floors"] = floors(outcomes, on="similarities")
    return out
