"""OpenTelemetry: the span tree of an add and a recall, pinned with the SDK's in-memory
exporter; a caller's `traceparent` continued; the dependencies' latency in /metrics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(p)  # once a process: the later tests of this worker keep it
    yield
    EXPORTER.shutdown()  # so they keep no spans


def tree(trace_id: str) -> list[str]:
    """The trace's spans, indented by depth, in the order they started."""
    spans: list[ReadableSpan] = [
        s for s in EXPORTER.get_finished_spans() if s.context.trace_id == int(trace_id, 16)
    ]
    by_id = {s.context.span_id: s for s in spans}

    def depth(s: ReadableSpan) -> int:
        d = 0
        while s.parent is not None and s.parent.span_id in by_id:
            s, d = by_id[s.parent.span_id], d + 1
        return d

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return [
        "  " * depth(s) + s.name + (f" {s.attributes.get('db.operation.name')}"
                                    if s.attributes and "db.operation.name" in s.attributes else "")
        for s in ordered
    ]  # fmt: skip


def header(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{TRACE[:-2]}{n:02x}-{PARENT}-01"}


ADD = """\
POST /v1/robots/{robot}/memories
  fastapi.dependencies
    postgresql SELECT
    postgresql INSERT
  fastapi.endpoint
    postgresql SELECT
    postgresql INSERT
    group commit
    postgresql WITH
    postgresql SELECT
    redis load
    postgresql WITH
    redis place
    postgresql WITH
  fastapi.serialization"""
# A recall whose hit the robot holds: the log row, the robot, the full-text search (its
# lexeme statistics read once), then working memory: a refresh that finds the hit placed by
# an add, not a recall, so a placement.
RECALL = """\
POST /v1/robots/{robot}/recall
  fastapi.dependencies
  fastapi.endpoint
    postgresql INSERT
    postgresql SELECT
    postgresql UPDATE
    postgresql SELECT
    postgresql SELECT
    postgresql SELECT
    postgresql WITH
    postgresql WITH
    redis refresh
    postgresql WITH
    redis place
    postgresql WITH
  fastapi.serialization"""


async def test_an_add_and_a_recall_as_span_trees_continuing_the_caller_s_trace(client) -> None:
    EXPORTER.clear()
    body = {"key": "k", "content": "the trace of an add", "embedding": [0.5] * 384}
    r = await client.post("/v1/robots/a/memories", json=body, headers=header(1))
    assert r.status_code == 201
    assert "\n".join(tree(TRACE[:-2] + "01")) == ADD
    recall = {"query": "trace", "strategy": "fulltext"}
    r = await client.post("/v1/robots/a/recall", json=recall, headers=header(2))
    assert [h["key"] for h in r.json()["hits"]] == ["k"]
    assert "\n".join(tree(TRACE[:-2] + "02")) == RECALL
    # the request's span continues the caller's trace, under the caller's span
    [root] = [
        s for s in EXPORTER.get_finished_spans()
        if s.context.trace_id == int(TRACE[:-2] + "02", 16) and s.parent is not None
        and s.parent.span_id == int(PARENT, 16)
    ]  # fmt: skip
    assert (root.kind, root.attributes["http.route"]) == (
        trace.SpanKind.SERVER, "/v1/robots/{robot}/recall"
    )  # fmt: skip
    # the group commit's statements serve several requests: a trace of their own
    flushes = [s for s in EXPORTER.get_finished_spans() if s.parent is None
               and s.name.startswith("postgresql")]  # fmt: skip
    assert flushes


async def test_metrics_carry_process_build_and_dependency_latency(client) -> None:
    await client.post("/v1/robots/a/memories", json={"content": "x"})
    text = (await client.get("/metrics")).text
    assert 'htm_build_info{version="1.0.0"} 1.0' in text
    assert "process_cpu_seconds_total" in text
    counts = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("htm_dependency_seconds_count")
    }
    assert set(counts) == {f'dependency="{d}"' for d in
                           ("postgresql", "redis", "embedder", "llm", "reranker")}  # fmt: skip
    assert counts['dependency="postgresql"'] > 0 and counts['dependency="redis"'] > 0
    assert "_created" not in text
