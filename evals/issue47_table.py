"""Issue 47's relevance table (`python -m evals.issue47_table LOAD.json REPLAY.json --out
evals/results/2026-12-07-issue47-table`): one row per change of items 1, 2 and 4, each read
from the results of two eval runs (`python -m evals`' JSON) made in one session:

- LOAD: deployments `i47-base` (every default) and `i47-stmt-propose` (the statement rule
  only proposes), each a fresh load, asked with the default request and `expand-entities`
  (evals/configs/issue47-deployments.json, issue47-recall.json);
- REPLAY: `i47-base`'s database again (`--reuse-database --replay`), asked after the usage
  stream with the weights of evals/configs/issue47-weights.json.

Columns: per set and mode, R@10 of the dev and test halves and of the multi-hop questions
(both halves); a second table the differences against the baseline row. Nothing of a set's
text is read: only the figures of the results."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "<!-- the tables below: python -m evals.issue47_table (what is above is kept) -->"
SET_MODES = ("realtalk/docs", "realtalk/content-only", "conv/docs", "conv/content-only")
BASELINE = "baseline"


@dataclass(frozen=True)
class Row:
    label: str  # what the row turns on or off
    run: str  # "load" or "replay"
    deployment: str
    config: str
    load: str  # which load of the sets it was asked of


ROWS = (
    Row(BASELINE, "load", "i47-base", "default", "A"),
    Row("+ entities expansion (item 1: `expand: entities`)", "load", "i47-base",
        "expand-entities", "A"),
    Row("− statement rule applied (item 2: HTM_SUPERSEDE_STATEMENTS=propose)", "load",
        "i47-stmt-propose", "default", "B"),
    Row("after the replay, weights 0 (item 4's usage, no signal)", "replay", "i47-base",
        "default", "A + replay"),
    Row("+ importance 0.05 (item 4, learned importance)", "replay", "i47-base",
        "importance-0.05", "A + replay"),
    Row("+ access 0.05 (item 4)", "replay", "i47-base", "access-0.05", "A + replay"),
    Row("+ importance 0.05 + access 0.05 (item 4)", "replay", "i47-base",
        "importance-access-0.05", "A + replay"),
)  # fmt: skip


def cell(result: dict[str, Any]) -> dict[str, float | None]:
    """A configuration's figures on one set and mode: R@10 dev, test, multi-hop (all)."""
    if result.get("status") != "ok":
        return {"dev": None, "test": None, "multi_hop": None}
    hop = result.get("kind", {}).get("multi_hop")
    return {
        "dev": result["split"]["dev"]["recall_at_10"],
        "test": result["split"]["test"]["recall_at_10"],
        "multi_hop": hop["recall_at_10"] if hop else None,
    }


def figures(runs: dict[str, dict[str, Any]], rows: tuple[Row, ...] = ROWS) -> list[dict[str, Any]]:
    """Each row's cells, from the runs' results ({"load": …, "replay": …}); a row whose run,
    deployment or configuration is missing is left out."""
    out = []
    for row in rows:
        dep = runs.get(row.run, {}).get("deployments", {}).get(row.deployment)
        if dep is None:
            continue
        cells = {
            sm: cell(dep["sets"][sm]["configs"][row.config])
            for sm in SET_MODES
            if sm in dep.get("sets", {}) and row.config in dep["sets"][sm]["configs"]
        }
        if cells:
            out.append({**row.__dict__, "cells": cells})
    return out


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _d(x: float | None, base: float | None) -> str:
    return "–" if x is None or base is None else f"{x - base:+.3f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The figures table, then the differences against the baseline row."""
    sms = [sm for sm in SET_MODES if any(sm in r["cells"] for r in rows)]
    head = "| row | load | " + " | ".join(f"{sm} dev / test / multi-hop" for sm in sms) + " |"
    rule = "|---|---|" + "---|" * len(sms)
    lines = [head, rule]
    for r in rows:
        got = [r["cells"].get(sm, {}) for sm in sms]
        three = [" / ".join(_f(c.get(k)) for k in ("dev", "test", "multi_hop")) for c in got]
        lines.append(f"| {r['label']} | {r['load']} | " + " | ".join(three) + " |")
    base = next((r for r in rows if r["label"] == BASELINE), None)
    if base is None:
        return "\n".join(lines) + "\n"
    lines += ["", "Δ against the baseline (dev / test / multi-hop):", "", head, rule]
    for r in rows:
        if r is base:
            continue
        got = [(r["cells"].get(sm, {}), base["cells"].get(sm, {})) for sm in sms]
        three = [
            " / ".join(_d(c.get(k), b.get(k)) for k in ("dev", "test", "multi_hop")) for c, b in got
        ]
        lines.append(f"| {r['label']} | {r['load']} | " + " | ".join(three) + " |")
    return "\n".join(lines) + "\n"


def provenance(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What each run was: its date, and per deployment its environment, load and embedding."""
    return {
        name: {
            "date": run.get("date"),
            "deployments": {
                d: {k: dep.get(k) for k in ("env", "embedding", "memories", "load_s", "seconds")}
                | {
                    "replay": {
                        sm: s["replay"] for sm, s in dep.get("sets", {}).items() if "replay" in s
                    }
                }
                for d, dep in run.get("deployments", {}).items()
            },
        }
        for name, run in runs.items()
    }


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of the same deployments on other sets as one: each deployment's sets and their
    configurations together (a later run's over an earlier's), the first run's other fields."""
    out = json.loads(json.dumps(runs[0]))
    for run in runs[1:]:
        for name, dep in run.get("deployments", {}).items():
            into = out["deployments"].setdefault(name, json.loads(json.dumps(dep)))
            for sm, got in dep.get("sets", {}).items():
                was = into["sets"].setdefault(sm, json.loads(json.dumps(got)))
                was["configs"] = {**was.get("configs", {}), **got.get("configs", {})}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.issue47_table", description=__doc__)
    p.add_argument("load", type=Path, help="the LOAD run's results JSON")
    p.add_argument(
        "replay",
        type=Path,
        nargs="+",
        help="the REPLAY runs' results JSON (their "
        "sets merged: one replay run may have asked some sets, another the others)",
    )
    p.add_argument("--out", type=Path, required=True, help="PATH: writes PATH.md and PATH.json")
    args = p.parse_args(argv)
    runs = {
        "load": json.loads(args.load.read_text()),
        "replay": merged([json.loads(p.read_text()) for p in args.replay]),
    }
    rows = figures(runs)
    args.out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "runs": provenance(runs)}, indent=1) + "\n"
    )
    md = args.out.with_suffix(".md")
    above = md.read_text().split(MARKER)[0] if md.exists() else ""
    md.write_text(f"{above}{MARKER}\n\n{markdown(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
