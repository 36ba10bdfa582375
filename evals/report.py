"""The eval's results: a compact table for the terminal, markdown, and the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
KINDS = (
    "single", "latest", "multi_hop", "temporal", "paraphrase", "synonym", "inverted", "speaker",
    "names", "open_domain",
)  # fmt: skip
# The summary's strategies: hybrid, its two inputs, and what a bare request gets.
SUMMARY = ("vector", "fulltext", "hybrid", "default")


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _row(s: dict[str, Any]) -> list[str]:
    if not s.get("questions"):
        return ["0", "–", "–", "–", "–", "–"]
    return [
        str(s["questions"]), _f(s["recall_at_5"]), _f(s["recall_at_10"]),
        _f(s.get("recall_at_20")), _f(s["mrr"]), _f(s["p50_ms"], 1),
    ]  # fmt: skip


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _ok(configs: dict[str, Any]) -> dict[str, Any]:
    return {n: c for n, c in configs.items() if c["status"] == "ok"}


def set_markdown(name: str, result: dict[str, Any], level: str = "###") -> list[str]:
    configs = result["configs"]
    dups = result.get("duplicates")
    stored = f" ({dups} of them duplicates the service stored once)" if dups else ""
    lines = [f"{level} {name}", "", f"{result['description']} {result['questions']} questions, "
             f"{result['memories']} memories{stored}.", ""]  # fmt: skip
    head = ["config", "split", "questions", "R@5", "R@10", "R@20", "MRR", "p50 ms"]
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
    changed = [(n, c) for n, c in _ok(configs).items() if "changed" in c]
    if changed:
        lines += ["", "Facts that changed (changes.jsonl): questions about the current value "
                  "(the later turn is the evidence) and about the earlier one:", ""]  # fmt: skip
        crows = [[f"`{n}`", which, str(s["questions"]), _f(s["recall_at_1"]), _f(s["recall_at_10"]),
                  _f(s.get("stale_above"))]
                 for n, c in changed for which, s in c["changed"].items()]  # fmt: skip
        lines += _table(["config", "about", "questions", "R@1", "R@10", "stale value first"],
                        crows)  # fmt: skip
    same = [(n, c["all"]["same_top_10"]) for n, c in _ok(configs).items()
            if "same_top_10" in c["all"]]  # fmt: skip
    if same:
        lines += ["", "R@20 is from the same questions asked with `limit` 20, whose top 10 was "
                  "the limit-10 answer for " + ", ".join(f"`{n}` {_f(x)}" for n, x in same)
                  + " of them."]  # fmt: skip
    expanded = [(n, c) for n, c in _ok(configs).items() if "recall_with_neighbours" in c["all"]]
    if expanded:
        found = ", ".join(f"`{n}` {_f(c['all']['recall_with_neighbours'])}" for n, c in expanded)
        lines += ["", f"Evidence among the hits and the neighbours returned with them: {found}."]
    kinds = [k for k in KINDS if any(k in c.get("kind", {}) for c in configs.values())]
    kinds += sorted({k for c in configs.values() for k in c.get("kind", {})} - set(KINDS))
    if len(kinds) > 1:
        lines += ["", "Recall@10 by kind (all / dev / test):", ""]
        krows = []
        for cname, c in _ok(configs).items():
            cells = []
            for k in kinds:
                parts = [c["kind"].get(k)] + [c["split_kind"][s].get(k) for s in c["split_kind"]]
                cells.append(" / ".join(_f(p["recall_at_10"]) if p else "–" for p in parts))
            krows.append([f"`{cname}`", *cells])
        first = next(iter(_ok(configs).values()), {})
        n = [str(first.get("kind", {}).get(k, {}).get("questions", "")) for k in kinds]
        lines += _table(["config", *(f"{k} ({c})" for k, c in zip(kinds, n, strict=True))], krows)
    if failed:
        lines += ["", *failed]
    return lines


def headline(deployment: dict[str, Any], set_name: str) -> tuple[str, dict[str, Any]] | None:
    """The deployment's headline configuration on a set (the first that ran when the
    headline did not)."""
    configs = _ok(deployment["sets"].get(set_name, {}).get("configs", {}))
    if deployment["headline"] in configs:
        return deployment["headline"], configs[deployment["headline"]]
    return next(iter(configs.items()), None)


FLOOR_ON = (("relevance_floors", "relevance"), ("floors", "score"))


def calibration(deployment: dict[str, Any], set_name: str) -> tuple[str, dict[str, Any]] | None:
    """The configuration the floor table is drawn from: `calibrate` when it ran, else the
    headline."""
    configs = _ok(deployment["sets"].get(set_name, {}).get("configs", {}))
    name = deployment.get("calibrate")
    if name in configs:
        return name, configs[name]
    return headline(deployment, set_name)


def floor_markdown(deployment: dict[str, Any]) -> list[str]:
    """The floor table of the deployment's calibration configuration: for each set, a floor
    on the hits' `relevance` (what `min_score` compares, when the service returns it) and one
    on their `score` (`vector_similarity`'s is in the JSON)."""
    found = {s: calibration(deployment, s) for s in deployment["sets"]}
    cols = [(s, h[1][key], label) for s, h in found.items() if h is not None
            for key, label in FLOOR_ON if key in h[1]]  # fmt: skip
    if not cols:
        return []
    names = sorted({h[0] for h in found.values() if h is not None})
    lines = [
        f"Floor calibration of `{'`, `'.join(names)}`: a floor on the top 10's `relevance` "
        "(what `min_score` compares; hits without one left out) or on their `score`, per set: "
        "the fraction of evidence hits kept / of the other hits dropped.",
        "",
    ]
    head = ["floor"] + [f"{s} {label}: kept / dropped" for s, _, label in cols]
    rows = []
    for i, r in enumerate(cols[0][1]["grid"]):
        cells = [f"{_f(f['grid'][i]['evidence_kept'])} / "
                 f"{_f(f['grid'][i]['non_evidence_dropped'])}" for _, f, _ in cols]  # fmt: skip
        rows.append([f"{r['floor']:.2f}", *cells])
    lines += _table(head, rows)
    best = "; ".join(
        f"{s} {label} {_f(f['floor_95'], 2)} ({f['evidence_hits']} evidence hits, "
        f"{f['non_evidence_hits']} others)"
        for s, f, label in cols
    )
    return [*lines, "", f"Highest floor keeping ≥ 95 % of the evidence hits: {best}."]


def _kinds(configs: list[dict[str, Any]]) -> list[str]:
    found = {k for c in configs for k in c.get("kind", {})}
    return [k for k in KINDS if k in found] + sorted(found - set(KINDS))


def summary_markdown(results: dict[str, Any]) -> list[str]:
    """For each set, a row per deployment, mode and strategy (vector, fulltext, hybrid,
    default): R@10 over all questions, dev and test, then per kind (dev / test); and whether
    hybrid kept up with its inputs."""
    deps = {n: d for n, d in results["deployments"].items() if d.get("status") == "ok"}
    if not deps:
        return []
    lines = ["## Summary: R@10", ""]
    for set_name in dict.fromkeys(r["set"] for d in deps.values() for r in d["sets"].values()):
        runs = [(dn, r) for dn, d in deps.items() for r in d["sets"].values()
                if r["set"] == set_name]  # fmt: skip
        ran = [c for _, r in runs for n, c in _ok(r["configs"]).items() if n in SUMMARY]
        kinds = _kinds(ran) if len(_kinds(ran)) > 1 else []
        first = ran[0] if ran else {}
        head = ["deployment", "mode", "strategy", "all", "dev", "test"]
        head += [f"{k} ({first['kind'].get(k, {}).get('questions', 0)}): dev / test" for k in kinds]
        rows = []
        for dname, r in runs:
            for cname in SUMMARY:
                c = r["configs"].get(cname)
                if c is None:
                    continue
                if c["status"] != "ok":
                    rows.append([f"`{dname}`", r["mode"], f"`{cname}`",
                                 f"failed ({c['http_status']})"])  # fmt: skip
                    continue
                splits = [_f(c["split"].get(s, {}).get("recall_at_10")) for s in ("dev", "test")]
                cells = [
                    " / ".join(_f(c["split_kind"].get(s, {}).get(k, {}).get("recall_at_10"))
                               for s in ("dev", "test"))
                    for k in kinds
                ]  # fmt: skip
                rows.append([f"`{dname}`", r["mode"], f"`{cname}`",
                             _f(c["all"]["recall_at_10"]), *splits, *cells])  # fmt: skip
        n = runs[0][1]["questions"]
        lines += [f"### {set_name} ({n} questions)", "", *_table(head, rows), ""]
    return [*lines, *check_markdown(results), ""]


def worst_cases(results: dict[str, Any]) -> list[dict[str, Any]]:
    """For each deployment and configuration: its lowest R@10 over every set and mode it ran
    on, on the dev halves (what a default is chosen by) and on the test halves (what it is
    reported by), with where each lowest is; the best worst case on dev first."""
    out = []
    for dname, d in results["deployments"].items():
        per: dict[str, dict[str, tuple[float, str]]] = {}
        for label, r in d.get("sets", {}).items():
            for cname, c in _ok(r["configs"]).items():
                for split in ("dev", "test"):
                    got = c["split"].get(split, {}).get("recall_at_10")
                    if got is None:
                        continue
                    best = per.setdefault(cname, {}).get(split)
                    if best is None or got < best[0]:
                        per[cname][split] = (got, label)
        for cname, splits in per.items():
            if {"dev", "test"} <= splits.keys():
                out.append({
                    "deployment": dname, "config": cname,
                    "dev": splits["dev"][0], "dev_at": splits["dev"][1],
                    "test": splits["test"][0], "test_at": splits["test"][1],
                })  # fmt: skip
    return sorted(out, key=lambda w: (-w["dev"], w["deployment"], w["config"]))


def worst_markdown(results: dict[str, Any]) -> list[str]:
    rows = [
        [f"`{w['deployment']}`", f"`{w['config']}`", _f(w["dev"]), w["dev_at"], _f(w["test"]),
         w["test_at"]]
        for w in worst_cases(results)
    ]  # fmt: skip
    if not rows:
        return []
    head = ["deployment", "configuration", "worst dev R@10", "on", "worst test R@10", "on"]
    return [
        "## Worst case over sets and modes",
        "",
        "A default is chosen by its lowest R@10 over every set and loading mode on the dev "
        "halves (best first), and reported on the test halves.",
        "",
        *_table(head, rows),
        "",
    ]


def hybrid_checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """For each deployment, set and mode where vector, fulltext and hybrid all ran: whether
    hybrid's R@10 (all questions) is at least each of its inputs'."""
    out = []
    for dname, d in results["deployments"].items():
        for r in d.get("sets", {}).values():
            ok = _ok(r["configs"])
            if not {"vector", "fulltext", "hybrid"} <= ok.keys():
                continue
            got = {n: ok[n]["all"]["recall_at_10"] for n in ("hybrid", "vector", "fulltext")}
            holds = got["hybrid"] >= max(got["vector"], got["fulltext"])
            out.append({"deployment": dname, "set": r["set"], "mode": r["mode"], **got,
                        "holds": holds})  # fmt: skip
    return out


def check_lines(results: dict[str, Any]) -> list[str]:
    """A FAIL line for each set and mode where hybrid's R@10 is below an input's, else one
    line saying it holds everywhere."""
    checks = results.get("hybrid_checks", [])
    failed = [
        f"FAIL: hybrid R@10 {_f(c['hybrid'])} < max(vector {_f(c['vector'])}, fulltext "
        f"{_f(c['fulltext'])}) on `{c['deployment']}` {c['set']}/{c['mode']}"
        for c in checks
        if not c["holds"]
    ]
    if failed or not checks:
        return failed
    return [f"hybrid R@10 ≥ max(vector, fulltext) on every set and mode ({len(checks)} checked)"]


def check_markdown(results: dict[str, Any]) -> list[str]:
    return [f"**{line}**" if line.startswith("FAIL") else line for line in check_lines(results)]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"# Recall eval ({results['profile']}), {results['date']}",
        "",
        f"{m['cores']} cores, {m['cpu']}; {results['seconds']:.0f} s wall time.",
        "Recall@k: the fraction of a question's evidence turns in the top k, averaged; MRR: "
        "1 / rank of the first evidence hit in the top 10; p50: a recall's latency at "
        f"concurrency {results['concurrency']}; R@20: the same question asked with `limit` "
        "20. Each deployment is the service started with its environment, on a fresh "
        "database (evals/deployments.py); each conversational set is loaded in two modes "
        "(evals/sets.py): `docs`, the turn's text with its `speaker` and `session` in the "
        'metadata, as docs/api.md asks, and `content-only`, "Speaker: text" and no metadata.',
        *(f"Set `{n}` skipped: {why}" for n, why in results.get("skipped", {}).items()),
        "",
        *summary_markdown(results),
        *worst_markdown(results),
    ]
    for dname, d in results["deployments"].items():
        lines += [f"## Deployment `{dname}`", ""]
        env = json.dumps(d["env"]) if d["env"] else "the service's defaults"
        request = json.dumps(d["request"])
        lines += [f"Environment {env}; request fields {request}; headline configuration "
                  f"`{d['headline']}`."]  # fmt: skip
        if d.get("status") != "ok":
            lines += ["", f"**Failed**: {d.get('error')}", ""]
            continue
        lines += [
            f"Embedding {d.get('embedding')}; {d['seconds']:.0f} s (service start "
            f"{d['service_start_s']:.0f} s, load {d['load_s']:.0f} s for {d['memories']} "
            "memories).",
            "",
            *floor_markdown(d),
            "",
        ]
        for name, result in d["sets"].items():
            lines += [*set_markdown(name, result), ""]
    return "\n".join(lines)


def terminal(results: dict[str, Any]) -> str:
    """One line per deployment, set and configuration: overall, dev, test, R@10 per kind."""
    out = []
    for dname, d in results["deployments"].items():
        if d.get("status") != "ok":
            out.append(f"{dname}: FAILED {d.get('error')}")
            continue
        for name, result in d["sets"].items():
            out.append(f"{dname} / {name}: {result['questions']} questions, "
                       f"{result['memories']} memories")  # fmt: skip
            for cname, c in result["configs"].items():
                if c["status"] != "ok":
                    out.append(f"  {cname:<22} FAILED {c['http_status']} "
                               f"{json.dumps(c['problem'])[:160]}")  # fmt: skip
                    continue
                a = c["all"]
                splits = "  ".join(f"{s} {v['recall_at_10']:.3f}" for s, v in c["split"].items())
                kinds = "  ".join(f"{k} {v['recall_at_10']:.3f}" for k, v in c["kind"].items())
                floor = c.get("floors", {}).get("floor_95")
                out.append(
                    f"  {cname:<22} R@5 {a['recall_at_5']:.3f}  R@10 {a['recall_at_10']:.3f}  "
                    f"R@20 {_f(a.get('recall_at_20'))}  MRR {a['mrr']:.3f}  "
                    f"p50 {a['p50_ms']:.1f} ms  floor95 {_f(floor, 2)}"
                    f" | R@10 {splits}" + (f" | {kinds}" if len(c["kind"]) > 1 else "")
                )
    return "\n".join([*out, *check_lines(results)])


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
