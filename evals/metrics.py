"""Recall@k, MRR and latency over ranked keys, per kind and split: plain arithmetic."""

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


@dataclass(frozen=True)
class Outcome:
    kind: str
    split: str
    evidence: tuple[str, ...]
    ranked: tuple[str, ...]
    latency_s: float


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    n = len(outcomes)
    if n == 0:
        return {"questions": 0}
    return {
        "questions": n,
        "recall_at_5": sum(recall_at(o.ranked, o.evidence, 5) for o in outcomes) / n,
        "recall_at_10": sum(recall_at(o.ranked, o.evidence, 10) for o in outcomes) / n,
        "mrr": sum(reciprocal_rank(o.ranked, o.evidence) for o in outcomes) / n,
        "p50_ms": 1000.0 * statistics.median(o.latency_s for o in outcomes),
    }


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
    return out
