"""What the scale run's parts share (scale.py, e2e.py, search_text.py, quality.py, trace.py):
the request header, the load's batch size, vectors as the JSON the service receives, the
prompt both runs send, the run profiles, the budget of waiting for a quiet machine, and a
status check."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import dataset
from bench.driver import Limits
from bench.http import Response

JSON = {"content-type": "application/json"}
BATCH = 500  # memories per load request (the service's max_batch_size)
SESSION = 100  # consecutive memories one robot writes (scale._authors)
RECALL_LIMIT = 10

# The prompt: the robot whose 1,000 working-memory items context reads, its 50-message
# session (scale.seed_prompt_session), a hybrid recall of 10; scale's `prompt` and e2e's
# `prompt_e2e` send the same request.
CONTEXT_ROBOT = "ctx"
PROMPT_SESSION, PROMPT_SESSION_MESSAGES = "bench", 50
PROMPT_WINDOW, PROMPT_RESERVE = 16_000, {"system": 500, "tools": 500, "output": 1000}
PROMPT_BUDGET = PROMPT_WINDOW - sum(PROMPT_RESERVE.values())
PROMPT_PATH = f"/v1/robots/{CONTEXT_ROBOT}/prompt"


def prompt_body(text: str) -> dict[str, Any]:
    return {
        "input": text,
        "session": PROMPT_SESSION,
        "context_window": PROMPT_WINDOW,
        "reserve": PROMPT_RESERVE,
        "recall": {"strategy": "hybrid", "limit": RECALL_LIMIT},
    }


_VEC_FMT = ",".join(["%.6g"] * dataset.DIM)


def vec_json(v: np.ndarray) -> str:
    return "[" + _VEC_FMT % tuple(v.tolist()) + "]"


def vec_list(v: np.ndarray) -> list[float]:
    """The vector as the service receives it: the JSON numbers we send, parsed back."""
    return json.loads(vec_json(v))


@dataclass
class Profile:
    name: str
    sizes: list[int]
    concurrency: int
    c1: Limits
    ck: Limits
    questions: int
    ann_queries: int
    quality_people: int
    quality_background: int
    model_c1: Limits
    model_ck: Limits
    model_texts: int
    quiet_wait_s: float  # per operation: wait this long at most for other work to settle
    quiet_budget_s: float  # in all, over the whole run
    session: int = SESSION  # consecutive memories one robot writes (the load's batch size)
    loaders: int = 2  # load requests in flight
    copy_floor: int = 0  # K: raw COPY of the first K memories beside the load (0: off)
    service: dict[str, str] = field(default_factory=dict)  # settings of the service under test


PROFILES = {
    "quick": Profile(
        name="quick",
        sizes=[2_000, 10_000],
        concurrency=8,
        c1=Limits(max_requests=100, max_seconds=0.4, warmup=6, min_requests=12),
        ck=Limits(max_requests=400, max_seconds=0.7, warmup=16, min_requests=24),
        questions=200,
        ann_queries=100,
        quality_people=12,
        quality_background=400,
        model_c1=Limits(max_requests=40, max_seconds=1.5, warmup=4, min_requests=10),
        model_ck=Limits(max_requests=400, max_seconds=2.5, warmup=16, min_requests=40),
        model_texts=256,
        quiet_wait_s=5.0,
        quiet_budget_s=30.0,
    ),
    "full": Profile(
        name="full",
        sizes=[10_000, 100_000],
        concurrency=8,
        c1=Limits(max_requests=500, max_seconds=4.0, warmup=20, min_requests=50),
        ck=Limits(max_requests=3000, max_seconds=6.0, warmup=32, min_requests=100),
        questions=400,
        ann_queries=300,
        quality_people=40,
        quality_background=3000,
        model_c1=Limits(max_requests=150, max_seconds=5.0, warmup=8, min_requests=30),
        model_ck=Limits(max_requests=2000, max_seconds=8.0, warmup=32, min_requests=100),
        model_texts=2048,
        quiet_wait_s=60.0,
        quiet_budget_s=900.0,
    ),
    # `make bench-large`: one point at 1,000,000 (bench/README.md). Sessions of 500, so every
    # load request carries the endpoint's maximum of 500 memories; the raw COPY floor beside
    # the first 50,000; fewer ANN queries (each exact kNN scans a million vectors).
    "large": Profile(
        name="large",
        sizes=[1_000_000],
        concurrency=8,
        c1=Limits(max_requests=500, max_seconds=4.0, warmup=20, min_requests=50),
        ck=Limits(max_requests=3000, max_seconds=6.0, warmup=32, min_requests=100),
        questions=400,
        ann_queries=100,
        quality_people=40,
        quality_background=3000,
        model_c1=Limits(max_requests=150, max_seconds=5.0, warmup=8, min_requests=30),
        model_ck=Limits(max_requests=2000, max_seconds=8.0, warmup=32, min_requests=100),
        model_texts=2048,
        quiet_wait_s=60.0,
        quiet_budget_s=900.0,
        session=BATCH,
        loaders=2,
        copy_floor=50_000,
        # Near 1,000,000 memories on 2 cores one 500-memory INSERT can run past the default
        # 5 s (the 2026-11-24 run stopped there): a deployment loading batches that large
        # at that size raises it too (README, "Benchmark").
        service={"statement_timeout_ms": "30000"},
    ),
}


@dataclass
class QuietBudget:
    """Seconds spent waiting for other work to settle, over the whole run."""

    spent_s: float = 0.0


def check_status(r: Response, status: int) -> Response:
    if r.status_code != status:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
    return r
