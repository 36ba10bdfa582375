"""The metric arithmetic, exact on hand-made rankings."""

from __future__ import annotations

import pytest

from evals.metrics import Outcome, breakdown, recall_at, reciprocal_rank, summary

RANKED = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")


def test_recall_at_k_is_the_fraction_of_evidence_in_the_first_k() -> None:
    assert recall_at(RANKED, ["c"], 5) == 1.0
    assert recall_at(RANKED, ["c", "g"], 5) == 0.5
    assert recall_at(RANKED, ["c", "g"], 10) == 1.0
    assert recall_at(RANKED, ["c", "g", "z"], 10) == pytest.approx(2 / 3)
    assert recall_at(RANKED, ["f"], 5) == 0.0
    assert recall_at((), ["a"], 10) == 0.0


def test_reciprocal_rank_is_that_of_the_first_evidence_hit() -> None:
    assert reciprocal_rank(RANKED, ["a"]) == 1.0
    assert reciprocal_rank(RANKED, ["j", "d"]) == 0.25
    assert reciprocal_rank(RANKED, ["z"]) == 0.0


def test_summary_averages_over_questions_and_takes_the_median_latency() -> None:
    outcomes = [
        Outcome("single", "dev", ("a",), RANKED, 0.010),  # R@5 1, R@10 1, RR 1
        Outcome("multi_hop", "dev", ("b", "g"), RANKED, 0.030),  # 0.5, 1, 0.5
        Outcome("names", "test", ("z",), RANKED, 0.020),  # 0, 0, 0
        Outcome("single", "test", ("f",), RANKED, 0.040),  # 0, 1, 1/6
    ]
    s = summary(outcomes)
    assert s["questions"] == 4
    assert s["recall_at_5"] == pytest.approx(1.5 / 4)
    assert s["recall_at_10"] == pytest.approx(3 / 4)
    assert s["mrr"] == pytest.approx((1 + 0.5 + 0 + 1 / 6) / 4)
    assert s["p50_ms"] == pytest.approx(25.0)
    b = breakdown(outcomes)
    assert b["all"] == s
    assert sorted(b["split"]) == ["dev", "test"]
    assert b["split"]["dev"]["recall_at_5"] == pytest.approx(0.75)
    assert b["split"]["test"]["recall_at_10"] == pytest.approx(0.5)
    assert sorted(b["kind"]) == ["multi_hop", "names", "single"]
    assert b["kind"]["single"]["mrr"] == pytest.approx((1 + 1 / 6) / 2)
    assert b["split_kind"]["test"]["single"]["questions"] == 1
    assert summary([]) == {"questions": 0}
