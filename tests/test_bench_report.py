"""The bench's pure parts: the fresh questions of recall with the model in the loop, and the
report of it and of the search text's storage (no database, no service)."""

from __future__ import annotations

from typing import Any

from bench import dataset, report
from bench.e2e import WAYS


def test_distinct_questions_never_repeat_and_are_seeded() -> None:
    qs = dataset.distinct_questions(7, 20_000)
    assert len(set(qs)) == 20_000
    assert qs[:50] == dataset.distinct_questions(7, 50)
    assert qs[:50] != dataset.distinct_questions(8, 50)
    assert all(q.endswith("?") for q in qs)


def _phase(p50: float, requests: int = 10) -> dict[str, Any]:
    return {
        "p50_ms": p50,
        "p95_ms": p50 * 1.5,
        "throughput": 1000 / p50,
        "requests": requests,
        "errors": 0,
        "cpu_ms": {"service": 1.0, "other_pct": 0.0},
    }


def _results() -> dict[str, Any]:
    e2e = {
        s: {
            "c1": {w: _phase(p) for w, p in zip(WAYS, (8.0, 8.4, 20.0, 25.0), strict=True)},
            "ck": {w: _phase(p) for w, p in zip(WAYS, (30.0, 31.0, 90.0, 100.0), strict=True)},
            "c1_cache": {"hits": 16, "misses": 16},
            "ck_cache": {
                "client_vector": {"hits": 0, "misses": 0},
                "cached": {"hits": 42, "misses": 0},
                "fresh": {"hits": 0, "misses": 42},
            },
        }
        for s in ("vector", "hybrid")
    }
    ops = {
        f"recall_{s}_all": {
            "service": _phase(8.0),
            "floor": _phase(4.0),
            "service_k": _phase(30.0),
            "floor_k": _phase(15.0),
        }
        for s in ("vector", "hybrid")
    }
    ops["add"] = {
        "service": _phase(9.0),
        "floor": _phase(6.0),
        "service_k": _phase(5.0),
        "floor_k": _phase(4.0),
    }
    model = {
        "embedding_floor": {
            "runtime": "onnx",
            "threads": 1,
            "texts": 200,
            "c1": {"p50_ms": 5.0, "p95_ms": 6.0},
            "memories": {"p50_ms": 7.0, "p95_ms": 8.0},
            "ck": {"batch": 8, "batch_ms": 32.0, "texts_per_s": 250.0},
        },
        "sql_floor_model_vectors": {"vector": {"p50_ms": 3.0}, "hybrid": {"p50_ms": 9.0}},
        "add": {
            "c1": {"client_vector": _phase(10.0), "text": _phase(20.0)},
            "ck": {"client_vector": _phase(5.0), "text": _phase(12.5)},
        },
    }
    search_text = {
        "memories": 100,
        "turns_per_session": 20,
        "load_s": 1.0,
        "conversation": {
            "memories": 100.0,
            "with_search_text": 100.0,
            "search_text_bytes": 200.0,
            "search_text_chars": 197.0,
            "content_chars": 85.0,
            "tsv_bytes": 300.0,
            "plain_tsv_bytes": 130.0,
            "row_bytes": 1600.0,
        },
        "tsv_ratio": 300 / 130,
        "gin_bytes": 7_000,
        "gin_plain_bytes": 4_500,
        "gin_ratio": 7_000 / 4_500,
        "session_index_bytes": 16_384,
        "scale_data": {"search_text_bytes": 0.0, "with_search_text": 0.0, "memories": 1000.0},
    }
    return {
        "profile": "quick",
        "date": "2026-11-26T00:00:00+00:00",
        "machine": {"host": "t", "cores": 2, "cpu": "c", "ram_gb": 1, "os": "o", "python": "3"},
        "versions": {"packages": {}},
        "settings": {
            "concurrency": 8,
            "seed": 1,
            "c1": {"max_requests": 1, "max_seconds": 1},
            "ck": {"max_requests": 1, "max_seconds": 1},
        },
        "scale": {
            "1000": {
                "ops": ops,
                "e2e": {"service_start_s": 9.0, "cached_questions": 200, **e2e, **model},
                "search_text": search_text,
            }
        },
    }


def test_report_prints_the_model_in_the_loop_beside_client_vectors() -> None:
    results = _results()
    results["targets"] = report.targets(results)
    md = report.markdown(results)
    assert "### Recall with the model in the loop at N = 1,000" in md
    # vector at c=1: client vector, cached, fresh; fresh ÷ client vector; ÷ the floor (4 ms)
    assert (
        "| vector | 1 | 8.00 / 12.0 | 8.40 / 12.6 | 20.0 / 30.0 | 25.0 / 37.5 | 2.50× | "
        "2.00× / 2.10× / 5.00× / 6.25×" in md
    )
    # at c=8 the ratios are against the floor under load (15 ms)
    assert (
        "| hybrid | 8 | 30.0 / 45.0 | 31.0 / 46.5 | 90.0 / 135 | 100 / 150 | 3.00× | "
        "2.00× / 2.07× / 6.00× / 6.67×" in md
    )
    # issue 32: each against the model alone + the raw SQL asked with the model's vectors
    assert (
        "| recall vector, fresh question | 20.0 | 5.00 | 3.00 | 12.0 | 2.50× | 11.1 | 66.7 |" in md
    )
    assert (
        "| recall hybrid, fresh, loading | 25.0 | 5.00 | 9.00 | 11.0 | 1.79× | 10.0 | 66.7 |" in md
    )
    # an add embeds a memory's content: its own floor (7 ms), and the add's SQL floor (6 ms)
    assert "| add, text only | 20.0 | 7.00 | 6.00 | 7.00 | 1.54× | 80.0 | 250 |" in md
    assert "| add, client vector (no model) | 10.0 | – | 6.00 | 4.00 | 1.67× | 200 | 250 |" in md
    bound = [t for t in results["targets"] if "issue 32" in t["target"]]
    assert [(t["target"].split(",")[0], t["value"], t["ok"]) for t in bound] == [
        ("recall vector", 12.0, False),
        ("recall hybrid", 6.0, False),
    ]
    fresh = [t for t in results["targets"] if "(fresh)" in t["target"]]
    assert [(t["value"], t["ok"]) for t in fresh] == [(2.5, False)]
    assert "| search_tsv, bytes (pg_column_size) | 130 | 300 | 2.31× |" in md
    assert "adds 370 bytes to its row" in md
