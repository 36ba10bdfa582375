"""Deployments: the defaults, the JSON file, the selection; and the report renders several
deployments, a failed one, and the floor table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals import report
from evals.deployments import DEFAULTS, Deployment, configs_of, load_deployments, select
from evals.metrics import Outcome, breakdown
from evals.runner import Config, request_body
from evals.sets import conv_set


def test_the_default_run_compares_the_old_default_with_the_services_defaults() -> None:
    old, new = DEFAULTS
    assert (old.name, old.env["HTM_SEARCH_TEXT"], old.headline) == ("old-default", "plain",
                                                                    "hybrid")  # fmt: skip
    assert (new.name, new.env, new.headline) == ("default", {}, "default")
    assert old.prefix == "eval-old-default-" and old.database == "htm_eval_old_default"


def test_a_conv_turn_is_its_text_with_metadata_in_docs_mode_and_prefixed_alone_else() -> None:
    docs, bare = conv_set(True, mode="docs"), conv_set(True, mode="content-only")
    a, b = docs.groups["d01"][5], bare.groups["d01"][5]
    assert (docs.mode, bare.mode) == ("docs", "content-only")
    assert a.metadata == {"dialogue": "d01", "session": 0, "turn": 5, "speaker": "Leo"}
    assert (b.key, b.content, b.created_at, b.metadata) == (
        a.key, f"Leo: {a.content}", a.created_at, {}
    )  # fmt: skip
    assert docs.questions == bare.questions
    assert conv_set(True, mode="content-only", labels=True).groups == bare.groups


def test_deployments_load_from_a_json_list_and_are_checked(tmp_path: Path) -> None:
    p = tmp_path / "d.json"
    p.write_text(json.dumps([
        {"name": "plain-text", "env": {"HTM_SEARCH_TEXT": "plain"}, "configs": ["hybrid"]},
        {"name": "floor", "request": {"min_score": 0.2}, "headline": "hybrid"},
    ]))  # fmt: skip
    got = load_deployments(p)
    assert got == [
        Deployment("plain-text", {"HTM_SEARCH_TEXT": "plain"}, {}, "default", ("hybrid",)),
        Deployment("floor", {}, {"min_score": 0.2}, "hybrid"),
    ]
    assert [d.name for d in select(got, "floor")] == ["floor"]
    run = [Config("vector", {}), Config("hybrid", {})]
    assert configs_of(got[0], run) == [Config("hybrid", {})]
    assert configs_of(got[1], run) == run
    assert select(got, None) == got
    with pytest.raises(ValueError, match="unknown deployments"):
        select(got, "nope")
    for bad in (
        [{"name": "Bad Name"}],
        [{"name": "x", "content": "plain"}],  # a mode is the run's, not a deployment's
        [{"name": "x", "request": {"limit": 3}}],
        [{"name": "x", "env": {"HTM_A": 1}}],
        [{"name": "x", "colour": "red"}],
        [{"name": "x"}, {"name": "x"}],
        [],
    ):
        p.write_text(json.dumps(bad))
        with pytest.raises(ValueError):
            load_deployments(p)


def test_a_request_is_the_deployments_fields_under_the_configs_under_the_evals() -> None:
    asked = request_body(Config("q", {"vector_query": "{query}"}), "Who is Biscuit?")
    assert asked["vector_query"] == asked["query"] == "Who is Biscuit?"
    body = request_body(Config("c", {"strategy": "vector", "min_score": 0.3}), "q?",
                        {"min_score": 0.1, "neighbours": 1})  # fmt: skip
    assert body == {"min_score": 0.3, "neighbours": 1, "strategy": "vector", "query": "q?",
                    "limit": 10, "load_into_working_memory": False}  # fmt: skip


def _deployment(headline: str, failed: bool = False) -> dict[str, Any]:
    if failed:
        return {"status": "failed", "error": "service exited at start", "env": {"HTM_X": "1"},
                "request": {}, "headline": headline, "sets": {}}  # fmt: skip
    outcomes = [
        Outcome("single", "dev", ("a",), ("a", "b"), 0.01, (0.9, 0.2), relevances=(0.5, None)),
        Outcome("latest", "test", ("d",), ("c", "d"), 0.01, (0.7, 0.6), relevances=(0.1, 0.3)),
    ]
    ok = {"request": {}, "status": "ok", "seconds": 1.0, **breakdown(outcomes)}
    refused = {"request": {"x": 1}, "status": "failed", "http_status": 422,
               "problem": {"detail": "x"}}  # fmt: skip
    return {
        "status": "ok", "env": {}, "request": {}, "headline": headline,
        "embedding": None, "seconds": 3.0, "service_start_s": 1.0, "load_s": 1.0,
        "memories": 4,
        "sets": {"conv/docs": {"set": "conv", "mode": "docs", "description": "C.",
                               "memories": 4, "duplicates": 0, "questions": 2,
                               "configs": {"hybrid": ok, "default": ok, "new": refused}}},
    }  # fmt: skip


def test_the_report_has_a_summary_a_floor_table_per_deployment_and_the_failures() -> None:
    results = {
        "profile": "full", "date": "2026-11-26T00:00:00+00:00", "concurrency": 4,
        "seconds": 9.0, "machine": {"cores": 2, "cpu": "x"},
        "deployments": {"old-default": _deployment("hybrid"),
                        "default": {**_deployment("default"), "calibrate": "hybrid"},
                        "broken": _deployment("default", failed=True)},
    }  # fmt: skip
    md = report.markdown(results)
    assert "## Summary: R@10\n\n### conv (2 questions)" in md
    assert (
        "| deployment | mode | strategy | all | dev | test | single (1): dev / test "
        "| latest (1): dev / test |"
    ) in md
    assert (
        "| `old-default` | docs | `hybrid` | 1.000 | 1.000 | 1.000 | 1.000 / – | – / 1.000 |" in md
    )
    assert "| `default` | docs | `default` | 1.000 | 1.000 | 1.000 | 1.000 / – | – / 1.000 |" in md
    assert md.count('- `new` failed: HTTP 422: {"detail": "x"}') == 2
    assert md.count("Floor calibration of `hybrid`") == 2  # default's calibrates on hybrid
    assert md.count("Floor calibration of `default`") == 0
    # evidence scores 0.9 and 0.6, the others 0.2 and 0.7
    # relevances: evidence 0.5 and 0.3, the other 0.1 (and one without)
    assert "| floor | conv/docs relevance: kept / dropped | conv/docs score: kept / dropped |" in md
    assert "| 0.60 | 0.000 / 1.000 | 1.000 / 0.500 |" in md
    assert "| 0.65 | 0.000 / 1.000 | 0.500 / 0.500 |" in md
    assert "| 0.30 | 1.000 / 1.000 | 1.000 / 0.500 |" in md
    assert (
        "Highest floor keeping ≥ 95 % of the evidence hits: conv/docs relevance 0.30 (2 evidence "
        "hits, 1 others); conv/docs score 0.60 (2 evidence hits, 2 others)"
    ) in md
    assert "**Failed**: service exited at start" in md
    assert "latest (1)" in md
    text = report.terminal(results)
    assert "broken: FAILED" in text and "floor95 0.60" in text


def _found(*found: bool) -> dict[str, Any]:
    """A configuration's result where question i finds its one evidence turn when found[i]."""
    outcomes = [Outcome("temporal", "dev" if i % 2 else "test", ("e",), ("e",) if f else ("x",),
                        0.01) for i, f in enumerate(found)]  # fmt: skip
    return {"request": {}, "status": "ok", "seconds": 1.0, **breakdown(outcomes)}


def test_hybrid_is_checked_against_both_inputs_on_every_set_and_mode() -> None:
    def run(mode: str, vector: dict, fulltext: dict, hybrid: dict) -> dict[str, Any]:
        return {"set": "realtalk", "mode": mode, "description": "R.", "memories": 4,
                "questions": 4, "configs": {"vector": vector, "fulltext": fulltext,
                                            "hybrid": hybrid}}  # fmt: skip

    half, quarter, all_ = _found(True, False, True, False), _found(True, False, False, False), (
        _found(True, True, True, True))  # fmt: skip
    deployment = {
        **_deployment("default"),
        "sets": {
            # a tie with the better input holds
            "realtalk/docs": run("docs", quarter, half, half),
            "realtalk/content-only": run("content-only", all_, quarter, half),
        },
    }
    results = {"deployments": {"default": deployment,
                               "broken": _deployment("default", failed=True)}}  # fmt: skip
    checks = report.hybrid_checks(results)
    assert checks == [
        {"deployment": "default", "set": "realtalk", "mode": "docs", "hybrid": 0.5,
         "vector": 0.25, "fulltext": 0.5, "holds": True},
        {"deployment": "default", "set": "realtalk", "mode": "content-only", "hybrid": 0.5,
         "vector": 1.0, "fulltext": 0.25, "holds": False},
    ]  # fmt: skip
    results["hybrid_checks"] = checks
    fail = ("FAIL: hybrid R@10 0.500 < max(vector 1.000, fulltext 0.250) on `default` "
            "realtalk/content-only")  # fmt: skip
    assert report.check_lines(results) == [fail]
    assert report.terminal(results).endswith(fail)
    results["hybrid_checks"] = checks[:1]
    assert report.check_lines(results) == [
        "hybrid R@10 ≥ max(vector, fulltext) on every set and mode (1 checked)"
    ]
    results.update(profile="full", date="2026-11-28T00:00:00+00:00", concurrency=4, seconds=1.0,
                   machine={"cores": 2, "cpu": "x"})  # fmt: skip
    results["hybrid_checks"] = checks
    md = report.markdown(results)
    assert f"**{fail}**" in md
    assert "| `default` | content-only | `vector` | 1.000 | 1.000 | 1.000 |" in md
    assert "| `default` | docs | `fulltext` | 0.500 | 0.000 | 1.000 |" in md


def test_the_worst_case_is_the_lowest_r10_over_sets_and_modes_per_split() -> None:
    def config(dev: float, test: float) -> dict[str, Any]:
        split = {"dev": {"recall_at_10": dev}, "test": {"recall_at_10": test}}
        return {"status": "ok", "split": split}

    def ran(set_name: str, mode: str, **configs: dict[str, Any]) -> dict[str, Any]:
        return {"set": set_name, "mode": mode, "configs": configs}

    refused = {"status": "failed", "http_status": 422}
    results = {"deployments": {"default": {"sets": {
        "conv/docs": ran("conv", "docs", a=config(0.8, 0.7), b=config(0.9, 0.9), c=refused),
        "realtalk/docs": ran("realtalk", "docs", a=config(0.6, 0.5), b=config(0.4, 0.6)),
        "realtalk/content-only": ran("realtalk", "content-only", a=config(0.7, 0.45),
                                     b=config(0.5, 0.3)),
    }}}}  # fmt: skip
    assert report.worst_cases(results) == [
        {"deployment": "default", "config": "a", "dev": 0.6, "dev_at": "realtalk/docs",
         "test": 0.45, "test_at": "realtalk/content-only"},
        {"deployment": "default", "config": "b", "dev": 0.4, "dev_at": "realtalk/docs",
         "test": 0.3, "test_at": "realtalk/content-only"},
    ]  # fmt: skip
    md = report.worst_markdown(results)
    assert md[0] == "## Worst case over sets and modes"
    assert "| `default` | `a` | 0.600 | realtalk/docs | 0.450 | realtalk/content-only |" in md
