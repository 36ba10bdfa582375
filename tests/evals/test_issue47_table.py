"""Issue 47's table (evals/issue47_table.py) from two runs' results: the rows it finds, the
figures and differences it writes, the note above its marker kept."""

from __future__ import annotations

import json
from typing import Any

from evals.issue47_table import MARKER, Row, figures, main, markdown, merged


def _result(dev: float, test: float, hop: float | None) -> dict[str, Any]:
    kind = {} if hop is None else {"multi_hop": {"recall_at_10": hop}}
    return {
        "status": "ok",
        "split": {"dev": {"recall_at_10": dev}, "test": {"recall_at_10": test}},
        "kind": kind,
    }


def _run(deployment: str, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    sets = {
        sm: {"configs": {c: per[sm] for c, per in configs.items() if sm in per}}
        for sm in ("realtalk/docs", "conv/content-only")
    }
    return {"date": "2026-12-07", "deployments": {deployment: {"env": {}, "sets": sets}}}


ROWS = (
    Row("baseline", "load", "base", "default", "A"),
    Row("+ x", "load", "base", "x", "A"),
    Row("+ w", "replay", "base", "w", "A + replay"),
    Row("absent", "replay", "other", "default", "C"),
)


def test_rows_read_each_runs_figures_and_differ_from_the_baseline() -> None:
    runs = {
        "load": _run("base", {
            "default": {"realtalk/docs": _result(0.6, 0.5, 0.4),
                        "conv/content-only": _result(0.55, 0.6, 0.45)},
            "x": {"realtalk/docs": _result(0.625, 0.5, 0.5)},
        }),
        "replay": _run("base", {"w": {"realtalk/docs": _result(0.5, 0.25, None)}}),
    }  # fmt: skip
    rows = figures(runs, ROWS)
    assert [(r["label"], r["load"]) for r in rows] == [
        ("baseline", "A"), ("+ x", "A"), ("+ w", "A + replay")
    ]  # fmt: skip
    assert rows[1]["cells"] == {"realtalk/docs": {"dev": 0.625, "test": 0.5, "multi_hop": 0.5}}
    assert markdown(rows).splitlines() == [
        "| row | load | realtalk/docs dev / test / multi-hop "
        "| conv/content-only dev / test / multi-hop |",
        "|---|---|---|---|",
        "| baseline | A | 0.600 / 0.500 / 0.400 | 0.550 / 0.600 / 0.450 |",
        "| + x | A | 0.625 / 0.500 / 0.500 | – / – / – |",
        "| + w | A + replay | 0.500 / 0.250 / – | – / – / – |",
        "",
        "Δ against the baseline (dev / test / multi-hop):",
        "",
        "| row | load | realtalk/docs dev / test / multi-hop "
        "| conv/content-only dev / test / multi-hop |",
        "|---|---|---|---|",
        "| + x | A | +0.025 / +0.000 / +0.100 | – / – / – |",
        "| + w | A + replay | -0.100 / -0.250 / – | – / – / – |",
    ]


def test_main_writes_both_files_and_keeps_the_note_above_its_marker(tmp_path) -> None:
    load = _run("i47-base", {"default": {"realtalk/docs": _result(0.6, 0.5, 0.4)}})
    replay = _run("i47-base", {"importance-0.05": {"realtalk/docs": _result(0.6, 0.5, 0.375)}})
    (tmp_path / "load.json").write_text(json.dumps(load))
    (tmp_path / "replay.json").write_text(json.dumps(replay))
    out = tmp_path / "table"
    (tmp_path / "table.md").write_text(f"# A note\n\n{MARKER}\nold table\n")
    argv = [str(tmp_path / "load.json"), str(tmp_path / "replay.json"), "--out", str(out)]
    assert main(argv) == 0
    md = (tmp_path / "table.md").read_text()
    assert md.startswith(f"# A note\n\n{MARKER}\n\n| row | load |")
    assert "old table" not in md
    assert (
        "| + importance 0.05 (item 4, learned importance) | A + replay | 0.600 / 0.500 / 0.375 |"
        in md
    )
    written = json.loads((tmp_path / "table.json").read_text())
    assert [r["config"] for r in written["rows"]] == ["default", "importance-0.05"]
    assert written["runs"]["load"]["date"] == "2026-12-07"


def test_replay_runs_of_other_sets_merge_into_one() -> None:
    conv = _run("base", {"w": {"conv/content-only": _result(0.5, 0.5, 0.5)}})
    real = _run("base", {"w": {"realtalk/docs": _result(0.25, 0.25, 0.25)}})
    rows = figures({"replay": merged([conv, real])}, (Row("+ w", "replay", "base", "w", "A"),))
    assert sorted(rows[0]["cells"]) == ["conv/content-only", "realtalk/docs"]
    assert rows[0]["cells"]["realtalk/docs"]["dev"] == 0.25
    assert conv["deployments"]["base"]["sets"]["realtalk/docs"] == {"configs": {}}  # kept
