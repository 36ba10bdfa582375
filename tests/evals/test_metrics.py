"""The metric arithmetic, exact on hand-made rankings."""

from __future__ import annotations

import pytest

from evals.metrics import FLOORS, Outcome, breakdown, floors, recall_at, reciprocal_rank, summary

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


def test_floors_count_the_evidence_hits_kept_and_the_other_hits_dropped() -> None:
    outcomes = [
        Outcome("single", "dev", ("a",), ("a", "b", "c"), 0.01, (0.9, 0.5, 0.1)),
        Outcome("single", "dev", ("e", "f"), ("d", "e", "f"), 0.01, (0.8, 0.4, 0.05)),
    ]
    f = floors(outcomes, grid=(0.0, 0.1, 0.45, 0.95))
    assert (f["evidence_hits"], f["non_evidence_hits"]) == (3, 3)
    by_floor = {r["floor"]: r for r in f["grid"]}
    assert by_floor[0.0] == {"floor": 0.0, "evidence_kept": 1.0, "non_evidence_dropped": 0.0}
    # evidence 0.9, 0.4, 0.05; others 0.5, 0.1, 0.8
    assert by_floor[0.1]["evidence_kept"] == pytest.approx(2 / 3)
    assert by_floor[0.1]["non_evidence_dropped"] == 0.0  # 0.1 ≥ 0.1 is kept
    assert by_floor[0.45]["evidence_kept"] == pytest.approx(1 / 3)
    assert by_floor[0.45]["non_evidence_dropped"] == pytest.approx(1 / 3)
    assert by_floor[0.95]["evidence_kept"] == 0.0
    assert f["floor_95"] == 0.0  # only no floor keeps 95 % here
    assert floors([])["floor_95"] is None
    assert [r["floor"] for r in floors(outcomes)["grid"]] == list(FLOORS)
    assert FLOORS[0] == 0.0 and FLOORS[-1] == 0.9 and len(FLOORS) == 19


def test_breakdown_has_the_floors_and_neighbours_count_only_when_returned() -> None:
    plain = Outcome("single", "dev", ("c",), ("a", "b"), 0.01, (1.0, 0.5))
    assert "recall_with_neighbours" not in summary([plain])
    near = Outcome("single", "dev", ("c",), ("a", "b"), 0.01, (1.0, 0.5), expanded=("a", "c", "b"))
    s = summary([plain, near])
    assert s["recall_at_10"] == 0.0
    assert s["recall_with_neighbours"] == 0.5
    assert breakdown([plain])["floors"]["non_evidence_hits"] == 2
