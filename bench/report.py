"""Results: the machine and versions, targets with pass/miss, the markdown table, and the
comparison with a previous JSON."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.config import PROJECT_ROOT

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
LARGE_N = 1_000_000  # from here on the targets are issue 16's for a million memories
PACKAGES = (
    "fastapi", "uvicorn", "starlette", "pydantic", "sqlalchemy", "asyncpg", "pgvector", "redis",
    "httpx", "aiohttp", "uvloop", "numpy", "sentence-transformers", "torch", "tiktoken",
    "hiredis",
)  # fmt: skip


# --- machine and versions --------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_gb": _ram_gb(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "loadavg_start": list(os.getloadavg()),
    }


def versions(readyz: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: readyz.get(k) for k in ("postgres", "pgvector", "timescaledb", "redis")
    }
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    out["packages"] = packages
    try:
        out["git"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out["git"] = None
    return out


# --- targets ---------------------------------------------------------------------------------


def _p50(ops: dict[str, Any], name: str, phase: str = "service") -> float | None:
    return ops.get(name, {}).get(phase, {}).get("p50_ms")


def _ratio(ops: dict[str, Any], name: str) -> float | None:
    s, f = _p50(ops, name), _p50(ops, name, "floor")
    return s / f if s and f else None


def _worst(values: list[float | None], higher_is_worse: bool = True) -> float | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return max(vals) if higher_is_worse else min(vals)


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets at the largest N of this run. From 1,000,000 memories on, those
    issue 16 sets for a million (hybrid ≤ 20 ms, add ≥ 200/s at c=8; vector and context as at
    100,000); the rest stay those for 100,000."""
    scale = results.get("scale", {})
    if not scale:
        return []
    n = max(int(k) for k in scale)
    ops = scale[str(n)].get("ops", {})
    recall_ops = [k for k in ops if k.startswith("recall_")]
    large = n >= LARGE_N
    rows: list[tuple[str, float | None, str, float, str]] = [
        (
            "recall hybrid, p50 (unfiltered)",
            _p50(ops, "recall_hybrid_all"),
            "<=",
            20.0 if large else 15.0,
            "ms",
        ),
        (
            "recall vector, p50 (worst of unfiltered / scope=self / one week)",
            _worst([_p50(ops, f"recall_vector_{v}") for v in ("all", "self", "week")]),
            "<=",
            10.0,
            "ms",
        ),
        # Issue 16's group-commit target (the 5 ms of an earlier issue was under the
        # floor's own INSERT: bench/README.md).
        ("add with client vector, p50 (c=1)", _p50(ops, "add"), "<=", 8.0, "ms"),
        (
            f"add with client vector, throughput (c={results['settings']['concurrency']})",
            ops.get("add", {}).get("service_k", {}).get("throughput"),
            ">=",
            200.0 if large else 300.0,
            "/s",
        ),
        (
            "context from 1,000 items, p50 (worst strategy)",
            _worst([_p50(ops, f"context_{s}") for s in ("recent", "important", "balanced")]),
            "<=",
            5.0,
            "ms",
        ),
        ("stats of a robot, p50", _p50(ops, "stats_robot"), "<=", 5.0, "ms"),
        ("stats of the namespace, p50", _p50(ops, "stats_namespace"), "<=", 5.0, "ms"),
        (
            "service / floor p50, recall (worst of 10)",
            _worst([_ratio(ops, k) for k in recall_ops]),
            "<=",
            2.0,
            "x",
        ),
        (
            "service / floor p50, add (worst of single / batch of 100)",
            _worst([_ratio(ops, k) for k in ("add", "add_batch100")]),
            "<=",
            2.0,
            "x",
        ),
        (
            "ANN vs exact agreement at k = 10",
            scale[str(n)].get("ann", {}).get("service"),
            ">=",
            0.95,
            "",
        ),
    ]
    e2e = scale[str(n)].get("e2e", {}).get("hybrid", {}).get("c1", {})
    client = e2e.get("client_vector", {}).get("p50_ms")
    for way in ("fresh", "cached"):
        got = e2e.get(way, {}).get("p50_ms")
        if client and got:
            rows.append(
                (
                    f"recall hybrid, the service embedding the question ({way}), p50 ÷ the "
                    "same with a client vector (c=1, issue 31)",
                    got / client,
                    "<=",
                    1.1,
                    "x",
                )
            )
    rows.append(("prompt, p50 (no model: full-text recall)", _p50(ops, "prompt"), "<=", 10.0, "ms"))
    rows.append(
        (
            "prompt, service / floor p50 (the same SQL and scripts, the outline beside the SQL)",
            _ratio(ops, "prompt"),
            "<=",
            2.0,
            "x",
        )
    )
    full = scale[str(n)].get("e2e", {})
    ef = full.get("embedding_floor")
    for strategy in ("vector", "hybrid"):
        fresh = full.get(strategy, {}).get("c1", {}).get("fresh", {}).get("p50_ms")
        sql = full.get("sql_floor_model_vectors", {}).get(strategy, {}).get("p50_ms") or ops.get(
            f"recall_{strategy}_all", {}
        ).get("floor", {}).get("p50_ms")
        if ef and fresh and sql:
            rows.append(
                (
                    f"recall {strategy}, fresh question, c=1: p50 − (embedding floor + SQL "
                    "floor) (issue 32)",
                    fresh - ef["c1"]["p50_ms"] - sql,
                    "<=",
                    5.0,
                    "ms",
                )
            )
    floor = scale[str(n)].get("load", {}).get("copy_floor")
    if floor:
        rows.append(
            (
                f"batch endpoint load rate ÷ raw COPY (first {floor['memories']:,}, "
                "memory with its indexes)",
                floor["memory"].get("endpoint_share"),
                ">=",
                0.9,
                "x",
            )
        )
        if floor["memory"].get("store_only_share") is not None:
            rows.append(
                (
                    "the same, storing only (`working_memory: false`)",
                    floor["memory"]["store_only_share"],
                    ">=",
                    0.9,
                    "x",
                )
            )
        if floor["memory"].get("import_share") is not None:
            rows.append(
                ("`htm import` of the same memories ÷ raw COPY", floor["memory"]["import_share"],
                 ">=", 0.9, "x")
            )  # fmt: skip
    out = []
    for label, value, op, target, unit in rows:
        ok = None if value is None else (value <= target if op == "<=" else value >= target)
        out.append(dict(target=label, n=n, value=value, op=op, goal=target, unit=unit, ok=ok))
    return out


# --- markdown --------------------------------------------------------------------------------


def _f(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    if unit == "x":
        return f"{x:.2f}×"
    if abs(x) >= 100:
        return f"{x:.0f}{unit}"
    if abs(x) >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def _cpu(cpu: dict[str, Any]) -> str:
    if not cpu:
        return "–"
    parts = [_f(cpu.get(k)) for k in ("service", "postgres", "redis", "client")]
    return " / ".join(parts)


def markdown(results: dict[str, Any]) -> str:
    m, v, s = results["machine"], results["versions"], results["settings"]
    pk = v.get("packages", {})
    k = s["concurrency"]
    lines = [
        f"# HTM bench ({results['profile']}) — {results['date']}",
        "",
        f"Machine: `{m['host']}`, {m['cores']} cores ({m['cpu']}), {m['ram_gb']} GB RAM, "
        f"{m['os']}, Python {m['python']}.  ",
        f"PostgreSQL {v.get('postgres')}, pgvector {v.get('pgvector')}, "
        f"TimescaleDB {v.get('timescaledb') or 'absent'}, Redis {v.get('redis')}; "
        f"FastAPI {pk.get('fastapi')}, uvicorn {pk.get('uvicorn')}, SQLAlchemy "
        f"{pk.get('sqlalchemy')}, asyncpg {pk.get('asyncpg')}, redis-py {pk.get('redis')} "
        f"(hiredis {pk.get('hiredis') or 'absent'}); "
        f"commit `{v.get('git')}`.  ",
        f"Seed {s['seed']}; c=1 runs ≤ {s['c1']['max_requests']} requests / "
        f"{s['c1']['max_seconds']} s, c={k} runs ≤ {s['ck']['max_requests']} / "
        f"{s['ck']['max_seconds']} s, after warm-up. Client: {results.get('client')} on one "
        "uvloop event loop.",
        "",
        "Columns: n = requests measured at c=1 / c=K; latency (ms) at c=1, where service, "
        "floor and core run request by request in rotating order; "
        "**floor** = the same SQL + Lua sent directly with "
        "asyncpg/redis-py; **core** = the essential statement alone; ×floor = service ÷ floor "
        f"(p50), or floor ÷ service (req/s at c={k}); CPU = ms of CPU per request at c={k} "
        "in service / PostgreSQL / Redis / bench client.",
    ]
    tg = results.get("targets", [])
    if tg:
        n = tg[0]["n"]
        note = "" if n >= 100_000 else " — the targets are set for 100,000; this run's largest N"
        if n >= LARGE_N:
            note = " (issue 16's targets for a million memories)"
        lines += ["", f"## Targets at N = {n:,}{note}", ""]
        lines += ["| target | measured | goal | |", "|---|---:|---:|---|"]
        for t in tg:
            verdict = {True: "pass", False: "**miss**", None: "–"}[t["ok"]]
            unit = t["unit"]
            value = _f(t["value"], "x") if unit == "x" else f"{_f(t['value'])} {unit}"
            lines.append(
                f"| {t['target']} | {value} | {t['op']} {t['goal']:g} {unit} | {verdict} |"
            )
    for n_str, sc in sorted(results.get("scale", {}).items(), key=lambda kv: int(kv[0])):
        ld, ann = sc.get("load", {}), sc.get("ann", {})
        db = sc.get("db", {})
        lines += [
            "",
            f"## N = {int(n_str):,} memories",
            "",
            f"Embeddings stored as `{db.get('vector_storage', 'vector')}`. "
            f"Loaded through the batch endpoint at {_f(ld.get('memories_per_s'))} memories/s. "
            f"Table {_mb(db, 'memory')}, HNSW index {_mb(db, 'memory_embedding_hnsw')}, "
            f"GIN index {_mb(db, 'memory_search_tsv', 'memory_content_tsv')}; shared_buffers "
            f"{db.get('settings', {}).get('shared_buffers')}. "
            f"ANN vs exact at k=10: {_f(ann.get('service'))} at the service's ef_search "
            f"(sweep: {', '.join(f'{e}: {_f(a)}' for e, a in ann.get('by_ef_search', {}).items())}"
            f"); plan `{ann.get('plan_ann')}`.",
            "",
            f"| operation | n | p50 | p95 | p99 | floor p50 | ×floor | core p50 | req/s c={k} "
            f"| p50 c={k} | p99 c={k} | floor req/s | ×floor | CPU ms/req |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for name, r in sc.get("ops", {}).items():
            svc, fl, core = r["service"], r.get("floor", {}), r.get("core", {})
            sk, fk = r.get("service_k", {}), r.get("floor_k", {})
            ratio = svc["p50_ms"] / fl["p50_ms"] if fl.get("p50_ms") and svc.get("p50_ms") else None
            kratio = (
                fk["throughput"] / sk["throughput"]
                if fk.get("throughput") and sk.get("throughput")
                else None
            )
            errors = sum(x.get("errors", 0) for x in (svc, fl, core, sk, fk) if x)
            failed = [x["error"] for x in (svc, fl, core, sk, fk) if x and x.get("error")]
            flag = f" ⚠ {errors} errors" if errors else ""
            if failed:
                flag += f" ⚠ failed: {failed[0][:80]}"
            other = sk.get("cpu_ms", {}).get("other_pct")
            if other is not None and other > 10:
                flag += f" ⚠ other load {other:.0f}%"
            av = r.get("autovacuum", {})
            if av.get("finished") or av.get("running"):
                flag += " ⚠ autovacuum"
            lines.append(
                f"| {name}{flag} | {svc.get('requests')}/{sk.get('requests', '–')} | "
                f"{_f(svc.get('p50_ms'))} | {_f(svc.get('p95_ms'))} | "
                f"{_f(svc.get('p99_ms'))} | {_f(fl.get('p50_ms'))} | {_f(ratio, 'x')} | "
                f"{_f(core.get('p50_ms'))} | {_f(sk.get('throughput'))} | {_f(sk.get('p50_ms'))} "
                f"| {_f(sk.get('p99_ms'))} | {_f(fk.get('throughput'))} | {_f(kratio, 'x')} | "
                f"{_cpu(sk.get('cpu_ms', {}))} |"
            )
        lines += _e2e(int(n_str), sc, k)
        lines += _load_sizes_ram(int(n_str), sc)
    lines += _plans(results)
    md = results.get("model")
    if md:
        q = md.get("quality", {})
        lines += [
            "",
            "## Quality with the local model (all-MiniLM-L6-v2)",
            "",
            f"{q.get('facts')} facts (one per person and relation) + {q.get('background')} "
            "background memories, embedded by the service; one paraphrased question per fact, "
            "asked without a vector (the service embeds it).",
            "",
            "| strategy | recall@5 | recall@10 | MRR@10 | p50 ms (c=4) |",
            "|---|---:|---:|---:|---:|",
        ]
        for st in ("vector", "fulltext", "hybrid"):
            x = q.get(st)
            if x:
                lines.append(
                    f"| {st} | {x['recall_at_5']:.3f} | {x['recall_at_10']:.3f} | "
                    f"{x['mrr_at_10']:.3f} | {_f(x['latency_under_load']['p50_ms'])} |"
                )
        lines += [
            "",
            "## Add with the local model (no client vector, micro-batching on)",
            "",
            "| clients | adds/s | p50 ms | p95 ms | p99 ms | errors | CPU ms/req |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for c, r in md.get("add", {}).items():
            lines.append(
                f"| {c[1:]} | {_f(r['throughput'])} | {_f(r['p50_ms'])} | {_f(r['p95_ms'])} | "
                f"{_f(r['p99_ms'])} | {r['errors']} | {_cpu(r.get('cpu_ms', {}))} |"
            )
        mf = md.get("model_floor", {})
        if mf:
            lines += [
                "",
                f"Model alone in one process: {_f(mf['batch64_texts_per_s'])} texts/s in "
                f"batches of 64; one text {_f(mf['single']['p50_ms'])} ms p50. "
                f"Bulk load through the batch endpoint with embedding: "
                f"{_f(md.get('load', {}).get('memories_per_s'))} memories/s.",
            ]
    lines += ["", f"Load average at start / end: {m.get('loadavg_start')} / {m.get('loadavg_end')}"]
    return "\n".join(lines) + "\n"


_WAYS = ("client_vector", "cached", "fresh", "fresh_load")


def _e2e(n: int, sc: dict[str, Any], k: int) -> list[str]:
    """Recall with the service embedding the question (bench/e2e.py) beside client vectors."""
    e2e = sc.get("e2e")
    if not e2e:
        return []
    ops = sc.get("ops", {})
    emb = e2e.get("embedding") or {}
    out = [
        "",
        f"### Recall with the model in the loop at N = {n:,}",
        "",
        "The request carries only its text; the service embeds it with its local model "
        f"(`{emb.get('model')}`, a second service process with `HTM_EMBEDDING_PROVIDER=local` "
        f"on the same database, ready in {_f(e2e.get('service_start_s'))} s, measured after "
        "the reads). **fresh**: a question this process was never asked, each request a "
        "different one, so the model embeds it (through the micro-batcher); **cached**: one "
        f"of {e2e.get('cached_questions')} questions asked before, its vector from the query "
        "cache; **client vector**: the request carries the 384 floats, as in the table above; "
        "**fresh, loading**: fresh, with `load_into_working_memory: true` (the others do not "
        f"load). c=1: the four request by request in rotating order; c={k}: each in turn. "
        "÷ floor: over the floor p50 of the same unfiltered recall in the table above (c=1: "
        f"its floor; c={k}: its floor under load). The service's query-cache counters "
        "(GET /v1/stats) show the fresh requests missing and the cached ones hitting.",
        "",
        "| recall, unfiltered | clients | p50 / p95 ms: client vector | cached | fresh | "
        "fresh, loading | fresh ÷ client vector | ÷ floor: client vector / cached / fresh / "
        "loading | req/s: client vector / cached / fresh / loading | service CPU ms/req: "
        "client vector / cached / fresh / loading | query cache: fresh misses, cached hits |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for strategy in ("vector", "hybrid"):
        r = e2e.get(strategy)
        if not r:
            continue
        base = ops.get(f"recall_{strategy}_all", {})
        for c, phase, floor_phase, cache in (
            (1, "c1", "floor", None),
            (k, "ck", "floor_k", "ck_cache"),
        ):
            res = r.get(phase, {})
            floor = base.get(floor_phase, {}).get("p50_ms")
            cv, fr = res.get("client_vector", {}), res.get("fresh", {})

            def over(x: float | None, d: float | None) -> str:
                return _f(x / d, "x") if x and d else "–"

            flag = ""
            errors = sum(res.get(w, {}).get("errors", 0) or 0 for w in _WAYS)
            if errors:
                flag += f" ⚠ {errors} errors"
            others = [res.get(w, {}).get("cpu_ms", {}).get("other_pct") for w in _WAYS]
            busiest = max((o for o in others if o is not None), default=None)
            if busiest is not None and busiest > 10:
                flag += f" ⚠ other load {busiest:.0f}%"
            if cache is None:
                counts = r.get("c1_cache", {})
                seen = f"{counts.get('misses')}, {counts.get('hits')} (with warm-up)"
                cpu = "–"
            else:
                counts = r.get(cache, {})
                seen = (
                    f"{counts.get('fresh', {}).get('misses')}, "
                    f"{counts.get('cached', {}).get('hits')} (with warm-up)"
                )
                cpu = " / ".join(_f(res.get(w, {}).get("cpu_ms", {}).get("service")) for w in _WAYS)
            out.append(
                f"| {strategy}{flag} | {c} | "
                + " | ".join(
                    f"{_f(res.get(w, {}).get('p50_ms'))} / {_f(res.get(w, {}).get('p95_ms'))}"
                    for w in _WAYS
                )
                + f" | {over(fr.get('p50_ms'), cv.get('p50_ms'))} | "
                + " / ".join(over(res.get(w, {}).get("p50_ms"), floor) for w in _WAYS)
                + " | "
                + " / ".join(_f(res.get(w, {}).get("throughput")) for w in _WAYS)
                + f" | {cpu} | {seen} |"
            )
    return out + _model_floors(n, sc, k)


def _model_floors(n: int, sc: dict[str, Any], k: int) -> list[str]:
    """Each operation with the model in the loop against the sum of its floors: the model
    alone on texts of the same kind (bench/e2e.py's embedding floor) and the raw SQL of the
    same operation (the scale table's floor)."""
    e2e, ops = sc.get("e2e", {}), sc.get("ops", {})
    ef = e2e.get("embedding_floor")
    if not ef:
        return []
    emb1, embk = ef["c1"]["p50_ms"], ef["ck"]["texts_per_s"]
    emb_memory = ef.get("memories", {}).get("p50_ms", emb1)
    model_sql = e2e.get("sql_floor_model_vectors", {})
    out = [
        "",
        f"Floors at N = {n:,}: the model alone (`{ef['runtime']}`, {ef['threads']} thread(s), "
        f"in the bench process, on {ef['texts']} other questions): a question {_f(emb1)} ms "
        f"p50, a memory's content {_f(emb_memory)} ms, batches of {k} questions {_f(embk)} "
        "texts/s. SQL floor: for a fresh question, the raw SQL of the same recall asked with "
        "the model's vectors of those questions (they walk the HNSW graph and match the full "
        "text otherwise than the bench's own vectors, which the scale table's floor uses; "
        "that one where this run has no such floor); for an add, the scale table's. The "
        "service with its model ÷ (embedding floor + SQL floor): what the service adds to "
        "the two things it cannot avoid.",
        "",
        "| with the model in the loop, c=1 | service p50 ms | embedding floor | SQL floor | "
        f"service − floors ms | service ÷ floors | req/s c={k} | SQL floor req/s c={k} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(
        label: str,
        c1: dict[str, Any],
        ck: dict[str, Any],
        sql: dict[str, Any],
        emb: float | None = emb1,
        sql_p50: float | None = None,
    ) -> None:
        got, fl = c1.get("p50_ms"), sql_p50 or sql.get("floor", {}).get("p50_ms")
        floors = (emb or 0.0) + fl if fl else None
        out.append(
            f"| {label} | {_f(got)} | {_f(emb) if emb else '–'} | {_f(fl)} | "
            f"{_f(got - floors if got and floors else None)} | "
            f"{_f(got / floors if got and floors else None, 'x')} | "
            f"{_f(ck.get('throughput'))} | {_f(sql.get('floor_k', {}).get('throughput'))} |"
        )

    for strategy in ("vector", "hybrid"):
        r = e2e.get(strategy)
        if r:
            base = ops.get(f"recall_{strategy}_all", {})
            for way, label in (("fresh", "fresh question"), ("fresh_load", "fresh, loading")):
                row(
                    f"recall {strategy}, {label}",
                    r.get("c1", {}).get(way, {}),
                    r.get("ck", {}).get(way, {}),
                    base,
                    sql_p50=model_sql.get(strategy, {}).get("p50_ms"),
                )
    add = e2e.get("add")
    if add:
        sql = ops.get("add", {})
        row("add, text only", add["c1"].get("text", {}), add["ck"].get("text", {}), sql, emb_memory)
        row(
            "add, client vector (no model)",
            add["c1"].get("client_vector", {}),
            add["ck"].get("client_vector", {}),
            sql,
            None,
        )
    prompt = e2e.get("prompt")
    if prompt:
        row("prompt, fresh input (hybrid recall of 10)", prompt["c1"], prompt["ck"], {})
        plain = ops.get("prompt", {})
        if plain:
            out.append(
                f"| prompt without the model (scale table) | {_f(plain['service'].get('p50_ms'))}"
                f" | – | – | – | – | {_f(plain.get('service_k', {}).get('throughput'))} | – |"
            )
    return out


def _mib(b: float | None) -> str:
    return "–" if b is None else f"{b / 1024 / 1024:,.1f}"


def _load_sizes_ram(n: int, sc: dict[str, Any]) -> list[str]:
    """The raw COPY floor of the load, every table and index with bytes per row, and RAM."""
    out: list[str] = []
    ld = sc.get("load", {})
    cf, fk = ld.get("copy_floor"), ld.get("first_k")
    out += [
        "",
        f"### Load, sizes and RAM at N = {n:,}",
        "",
        f"Load: {n:,} memories in {ld.get('batches')} requests ({ld.get('loaders', 2)} in "
        f"flight), {_f(ld.get('load_s'))} s, {_f(ld.get('memories_per_s'))} memories/s.",
    ]
    if ld.get("reused"):
        out[-1] += (
            f" This run measured a database kept from the run of {ld['reused_from']}, which "
            "loaded it: the load figures here are that run's."
            if ld.get("reused_from")
            else " This run measured a kept database: it loaded nothing."
        )
    if cf and fk:
        out += [
            "",
            f"Raw COPY floor (bench/bulk.py), the first {cf['memories']:,} memories in the "
            f"load's {cf['batches']} batches, {cf['in_flight']} in flight, into fresh copies of "
            "the tables with the same indexes:",
            "",
            "| what | memories/s | endpoint ÷ this | CPU ms per memory |",
            "|---|---:|---:|---|",
            f"| batch endpoint, first {fk['memories']:,} of the load | "
            f"{_f(fk['memories_per_s'])} | – | {_cpu(fk.get('cpu_ms_per_memory'))} |",
        ]
        so = (ld.get("store_only") or {}).get("first_k")
        if so:
            out.append(
                f"| the same, storing only (`working_memory: false`) | "
                f"{_f(so['memories_per_s'])} | – | {_cpu(so.get('cpu_ms_per_memory'))} |"
            )
        imp = ld.get("htm_import")
        if imp:
            cpu = imp.get("cpu_ms_per_memory") or {}
            out.append(
                f"| `htm import` of a file of the same memories (CPU: the command in place "
                f"of the service) | {_f(imp['memories_per_s'])} | – | "
                f"{_cpu({**cpu, 'service': cpu.get('import')})} |"
            )
        labels = {
            "memory": "COPY into memory",
            "memory_key_event": "COPY into memory + memory_key + memory_event",
        }
        for variant, label in labels.items():
            v = cf[variant]
            share = _f(v.get("endpoint_share"), "x")
            if v.get("store_only_share") is not None:
                share += f" (storing only {_f(v['store_only_share'], 'x')})"
            if v.get("import_share") is not None:
                share += f" (`htm import` {_f(v['import_share'], 'x')})"
            out.append(
                f"| {label} | {_f(v['memories_per_s'])} | {share} "
                f"| {_cpu(v.get('cpu_ms_per_memory'))} |"
            )
        out += [
            "",
            "CPU: service / PostgreSQL / Redis / bench client (it formats the JSON "
            "bodies and the CSV).",
        ]
    sz = sc.get("sizes")
    if sz:
        out += [
            "",
            f"Database {_mib(sz['database_bytes'])} MiB "
            f"({sz['database_bytes'] / n:,.0f} bytes per memory). Tables (MiB; rows as "
            "estimated by ANALYZE; bytes per memory = total ÷ N):",
            "",
            "| table | rows | heap | TOAST + maps | indexes | total | bytes per memory |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for t in sz["tables"]:
            if t["total_bytes"] < 1024 * 1024 and t["name"] != "memory_key":
                continue
            out.append(
                f"| {t['name']} | {t['rows']:,} | {_mib(t['heap_bytes'])} | "
                f"{_mib(t['toast_fsm_vm_bytes'])} | {_mib(t['index_bytes'])} | "
                f"{_mib(t['total_bytes'])} | {t['total_bytes'] / n:,.0f} |"
            )
        out += [
            "",
            "| index | table | method | MiB | bytes per memory |",
            "|---|---|---|---:|---:|",
        ]
        for i in sz["indexes"]:
            if i["bytes"] >= 1024 * 1024:
                out.append(
                    f"| {i['name']} | {i['table']} | {i['method']} | {_mib(i['bytes'])} | "
                    f"{i['bytes'] / n:,.0f} |"
                )
    out += _search_text(sc.get("search_text"))
    for label, key in (("after the load", "ram_after_load"), ("at the end", "ram_end")):
        ram = sc.get(key)
        if not ram:
            continue
        pg, svc, rd = ram.get("postgres") or {}, ram.get("service") or {}, ram.get("redis", {})
        out += [
            "",
            f"RAM {label}: PostgreSQL {pg.get('processes')} processes, RSS "
            f"{_mib(pg.get('rss_bytes'))} MiB, PSS {_mib(pg.get('pss_bytes'))} MiB; service RSS "
            f"{_mib(svc.get('rss_bytes'))} MiB; Redis used_memory {_mib(rd.get('used_memory'))} "
            f"MiB (RSS {_mib(rd.get('used_memory_rss'))} MiB, {rd.get('keys')} keys).",
        ]
    wm = sc.get("working_memory_bytes")
    if wm and wm.get("items"):
        out += [
            "",
            f"Redis working memory of `ctx`: {wm['items']:,} items, {wm['bytes']:,} bytes "
            f"(MEMORY USAGE of its 9 keys) = {wm['per_item']:,.0f} bytes per item, of which "
            f"{wm['content_bytes'] / wm['items']:,.0f} content.",
        ]
    return out


def _search_text(st: dict[str, Any] | None) -> list[str]:
    """What the search text costs in storage (bench/search_text.py)."""
    if not st:
        return []
    sd, cv, k = st["scale_data"], st["conversation"], st["memories"]
    out = [
        "",
        f"Search text (issue 31). The scale data is plain: {sd['with_search_text']:,.0f} of "
        f"{sd['memories']:,.0f} memories have one, {_f(sd['search_text_bytes'])} bytes per "
        f"memory. {k:,} conversation memories added after the timed phases (metadata "
        f"`speaker` and `session`: sessions of {st['turns_per_session']} turns, two speakers; "
        "the scale sentences as contents):",
        "",
        "| per conversation memory | plain (content only) | with its search text | ratio |",
        "|---|---:|---:|---:|",
        f"| search_text, bytes (pg_column_size; characters: content {_f(cv['content_chars'])},"
        f" search text {_f(cv['search_text_chars'])}) | 0 | {_f(cv['search_text_bytes'])} "
        "| – |",
        f"| search_tsv, bytes (pg_column_size) | {_f(cv['plain_tsv_bytes'])} | "
        f"{_f(cv['tsv_bytes'])} | {_f(st['tsv_ratio'], 'x')} |",
        f"| its GIN index, bytes per memory (over these {k:,} rows alone) | "
        f"{_f(st['gin_plain_bytes'] / k)} | {_f(st['gin_bytes'] / k)} | "
        f"{_f(st['gin_ratio'], 'x')} |",
        f"| the whole row, bytes (pg_column_size, with metadata and the speaker tag) | – | "
        f"{_f(cv['row_bytes'])} | – |",
    ]
    extra = cv["search_text_bytes"] + cv["tsv_bytes"] - cv["plain_tsv_bytes"]
    turns = st.get("session_index_bytes")
    out += [
        "",
        f"So a conversation memory's search text adds {_f(extra)} bytes to its row (the text "
        "and the larger tsvector) and "
        f"{_f((st['gin_bytes'] - st['gin_plain_bytes']) / k)} to the GIN index"
        + (
            f"; the index of a session's turns (`memory_session_turns`, conversation memories "
            f"only) holds {_f(turns / k)} bytes per memory"
            if turns
            else ""
        )
        + ".",
    ]
    return out


def _plans(results: dict[str, Any]) -> list[str]:
    """EXPLAIN ANALYZE of each statement the floor sent for one request, at the largest N."""
    scale = results.get("scale", {})
    if not scale:
        return []
    n = max(scale, key=int)
    plans = scale[n].get("plans", {})
    if not plans:
        return []
    out = [
        "",
        f"### Where the SQL time goes at N = {int(n):,} (EXPLAIN ANALYZE, one request)",
        "",
        "| operation | statements | ms in PostgreSQL | slowest statement: plan |",
        "|---|---:|---:|---|",
    ]
    for name, stmts in plans.items():
        timed = [s for s in stmts if s.get("ms") is not None]
        total = sum(s["ms"] for s in timed)
        worst = max(timed, key=lambda s: s["ms"], default=None)
        plan = f"{_f(worst['ms'])} ms: `{worst['plan'][:150]}`" if worst else "–"
        out.append(f"| {name} | {len(stmts)} | {_f(total)} | {plan} |")
    return out


def _mb(db: dict[str, Any], rel: str, before: str | None = None) -> str:
    """`rel`'s size in MB, or `before`'s (the name it had in older runs)."""
    b = db.get("bytes", {}).get(rel)
    if b is None and before is not None:
        b = db.get("bytes", {}).get(before)
    return "–" if b is None else f"{b / 1024 / 1024:.0f} MB"


# --- comparison ------------------------------------------------------------------------------


def _delta(old: float | None, new: float | None) -> str:
    if old is None or new is None or old == 0:
        return "–"
    return f"{100.0 * (new - old) / old:+.0f}%"


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Deltas of p50 (c=1) and throughput (c=K) per operation and N, targets and quality."""
    lines = [
        f"# Compared with {old.get('date')} ({old.get('profile')}, "
        f"`{old.get('versions', {}).get('git')}`)",
    ]
    for n_str, sc in sorted(new.get("scale", {}).items(), key=lambda kv: int(kv[0])):
        prev = old.get("scale", {}).get(n_str)
        if not prev:
            lines += ["", f"N = {int(n_str):,}: not in the previous run"]
            continue
        lines += [
            "",
            f"## N = {int(n_str):,}",
            "",
            "| operation | p50 before | p50 now | Δ | req/s before | req/s now | Δ |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in sc.get("ops", {}).items():
            p = prev.get("ops", {}).get(name)
            if not p:
                continue
            a, b = p["service"].get("p50_ms"), r["service"].get("p50_ms")
            ta = p.get("service_k", {}).get("throughput")
            tb = r.get("service_k", {}).get("throughput")
            lines.append(
                f"| {name} | {_f(a)} | {_f(b)} | {_delta(a, b)} | {_f(ta)} | {_f(tb)} | "
                f"{_delta(ta, tb)} |"
            )
    old_t = {t["target"]: t for t in old.get("targets", [])}
    if new.get("targets"):
        lines += ["", "## Targets", "", "| target | before | now |", "|---|---:|---:|"]
        for t in new["targets"]:
            o = old_t.get(t["target"], {})
            before = f"{_f(o.get('value'))} (N={o['n']:,})" if o else "–"
            lines.append(f"| {t['target']} | {before} | {_f(t['value'])} (N={t['n']:,}) |")
    oq = old.get("model", {}).get("quality", {})
    nq = new.get("model", {}).get("quality", {})
    if oq and nq:
        lines += ["", "## Quality", "", "| strategy | recall@10 before | now |", "|---|---:|---:|"]
        for st in ("vector", "fulltext", "hybrid"):
            if st in oq and st in nq:
                lines.append(
                    f"| {st} | {oq[st]['recall_at_10']:.3f} | {nq[st]['recall_at_10']:.3f} |"
                )
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if results["profile"] == "full" else f"-{results['profile']}"
    host = results["machine"]["host"]
    dated = out_dir / f"{results['date'][:10]}-{host}{suffix}.json"
    text = json.dumps(results, indent=1, default=str) + "\n"
    dated.write_text(text)
    # A large run keeps its own "latest", so that it does not replace `make bench`'s.
    latest = "latest-large" if results["profile"] == "large" else "latest"
    (out_dir / f"{latest}.json").write_text(text)
    md = out_dir / f"{latest}.md"
    md.write_text(markdown(results))
    return dated, md
