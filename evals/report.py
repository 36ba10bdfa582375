"""The eval's results: a compact table for the terminal, markdown, and the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
KINDS = ("single", "multi_hop", "temporal", "paraphrase", "names")


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _row(s: dict[str, Any]) -> list[str]:
    if not s.get("questions"):
        return ["0", "–", "–", "–", "–"]
    return [
        str(s["questions"]), _f(s["recall_at_5"]), _f(s["recall_at_10"]), _f(s["mrr"]),
        _f(s["p50_ms"], 1),
    ]  # fmt: skip


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def set_markdown(name: str, result: dict[str, Any]) -> list[str]:
    configs = result["configs"]
    lines = [f"### {name}", "", f"{result['description']} {result['questions']} questions, "
             f"{result['memories']} memories.", ""]  # fmt: skip
    head = ["config", "split", "questions", "R@5", "R@10", "MRR", "p50 ms"]
    rows, failed = [], []
    for cname, c in configs.items():
        if c["status"] != "ok":
            failed.append(f"- `{cname}` failed: HTTP {c['http_status']}: "
                          f"{json.dumps(c['problem'])[:300]}")  # fmt: skip
            continue
        rows.append([f"`{cname}`", "all", *_row(c["all"])])
        for split, s in c["split"].items():
            rows.append([f"`{cname}`", split, *_row(s)])
    lines += _table(head, rows)
    kinds = [k for k in KINDS if any(k in c.get("kind", {}) for c in configs.values())]
    if len(kinds) > 1:
        lines += ["", "Recall@10 by kind (all / dev / test):", ""]
        krows = []
        for cname, c in configs.items():
            if c["status"] != "ok":
                continue
            cells = []
            for k in kinds:
                parts = [c["kind"].get(k)] + [c["split_kind"][s].get(k) for s in c["split_kind"]]
                cells.append(" / ".join(_f(p["recall_at_10"]) if p else "–" for p in parts))
            krows.append([f"`{cname}`", *cells])
        n = [str(next(iter(configs.values())).get("kind", {}).get(k, {}).get("questions", ""))
             for k in kinds]  # fmt: skip
        lines += _table(["config", *(f"{k} ({c})" for k, c in zip(kinds, n, strict=True))], krows)
    if failed:
        lines += ["", *failed]
    return lines


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"# Recall eval ({results['profile']}), {results['date']}",
        "",
        f"{m['cores']} cores, {m['cpu']}; embedding {results.get('embedding')}; "
        f"{results['seconds']:.0f} s wall time (service start {results['service_start_s']:.0f} s, "
        f"load {results['load_s']:.0f} s for {results['memories']} memories).",
        "Recall@k: the fraction of a question's evidence turns in the top k, averaged; MRR: "
        "1 / rank of the first evidence hit in the top 10; p50: a recall's latency at "
        f"concurrency {results['concurrency']}.",
        "",
    ]
    for name, result in results["sets"].items():
        lines += [*set_markdown(name, result), ""]
    return "\n".join(lines)


def terminal(results: dict[str, Any]) -> str:
    """One line per set and configuration: overall, dev, test, and R@10 per kind."""
    out = []
    for name, result in results["sets"].items():
        out.append(f"{name}: {result['questions']} questions, {result['memories']} memories")
        for cname, c in result["configs"].items():
            if c["status"] != "ok":
                out.append(f"  {cname:<22} FAILED {c['http_status']} "
                           f"{json.dumps(c['problem'])[:160]}")  # fmt: skip
                continue
            a = c["all"]
            splits = "  ".join(f"{s} {v['recall_at_10']:.3f}" for s, v in c["split"].items())
            kinds = "  ".join(f"{k} {v['recall_at_10']:.3f}" for k, v in c["kind"].items())
            out.append(
                f"  {cname:<22} R@5 {a['recall_at_5']:.3f}  R@10 {a['recall_at_10']:.3f}  "
                f"MRR {a['mrr']:.3f}  p50 {a['p50_ms']:.1f} ms | R@10 {splits}"
                + (f" | {kinds}" if len(c["kind"]) > 1 else "")
            )
    return "\n".join(out)


def write(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if results["profile"] == "full" else f"-{results['profile']}"
    text = json.dumps(results, indent=1) + "\n"
    dated = out_dir / f"{results['date'][:10]}{suffix}.json"
    dated.write_text(text)
    (out_dir / f"latest{suffix}.json").write_text(text)
    md = out_dir / f"latest{suffix}.md"
    md.write_text(markdown(results))
    dated.with_suffix(".md").write_text(markdown(results))
    return dated, md
