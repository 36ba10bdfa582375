"""OpenTelemetry traces and the dependencies' latency, in one place every layer may use.

A request's span is FastAPI's own (it continues a caller's `traceparent`).
`dependency(name, **attributes)` wraps one call to PostgreSQL, Redis, the embedder, the LLM
or the reranker: a client span (a child of the request's) and its duration in `TIMINGS`,
which /metrics reports as `htm_dependency_seconds`. `database_call` does so for PostgreSQL
and Redis, their spans named and described by the OpenTelemetry database conventions
(app/db/spans.py, app/working_memory/store.py). Spans are exported by OTLP when the
standard OTEL_* variables ask for it (`configure`: an OTLP endpoint, or
OTEL_TRACES_EXPORTER=otlp); without them the API's tracer records nothing, and only the
timings are kept.
"""

from __future__ import annotations

import contextlib
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace

tracer = trace.get_tracer("htm")

# Upper bounds in seconds: a Redis script or an index lookup takes 0.1-1 ms, a search
# 2-10 ms, an embedding ~13 ms, a model's or reranker's answer up to seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0)
DEPENDENCIES = ("postgresql", "redis", "embedder", "llm", "reranker")


class Timings:
    """Per dependency: calls per bucket (cumulative at read), their sum and count."""

    def __init__(self) -> None:
        self.buckets = {d: [0] * (len(BUCKETS) + 1) for d in DEPENDENCIES}
        self.sums = dict.fromkeys(DEPENDENCIES, 0.0)

    def observe(self, name: str, seconds: float) -> None:
        i = bisect_left(BUCKETS, seconds)  # the first bound >= seconds (len: past the last)
        self.buckets[name][i] += 1
        self.sums[name] += seconds


TIMINGS = Timings()


def tracing() -> bool:
    """Whether spans go anywhere: a tracer provider was set (`configure`, or a test's). Without
    one the API's tracer makes non-recording spans, whose context switching cost ~15 µs per
    dependency call, several a request (bench/results/2026-12-07-cpu.md)."""
    return not isinstance(trace.get_tracer_provider(), _NO_PROVIDER)


_NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class _Timed:
    """`dependency` without a span (no tracer provider): its duration only."""

    __slots__ = ("name", "started")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> trace.Span:
        self.started = time.perf_counter()
        return trace.INVALID_SPAN

    def __exit__(self, *exc: object) -> None:
        TIMINGS.observe(self.name, time.perf_counter() - self.started)


def dependency(name: str, **attributes: Any) -> contextlib.AbstractContextManager[trace.Span]:
    if not tracing():
        return _Timed(name)
    return _spanned(name, name, attributes)


def database_call(
    name: str, describe: Callable[[], tuple[str, dict[str, Any]]]
) -> contextlib.AbstractContextManager[trace.Span]:
    """`dependency` for a database call (PostgreSQL, Redis), its span named and described by
    the OpenTelemetry database conventions: `describe()` gives the span's name and
    attributes, called only when spans are recorded."""
    if not tracing():
        return _Timed(name)
    span_name, attributes = describe()
    return _spanned(name, span_name, attributes)


@contextlib.contextmanager
def _spanned(name: str, span_name: str, attributes: dict[str, Any]) -> Iterator[trace.Span]:
    started = time.perf_counter()
    try:
        with tracer.start_as_current_span(
            span_name, kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span
    finally:
        TIMINGS.observe(name, time.perf_counter() - started)


def exporting() -> bool:
    env = os.environ
    return (
        bool(
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or env.get("OTEL_TRACES_EXPORTER", "").lower() == "otlp"
        )
        and env.get("OTEL_SDK_DISABLED", "").lower() != "true"
    )


_configured: list[bool] = []


def configure(version: str) -> bool:
    """The process's tracer provider with an OTLP exporter, when the OTEL_* variables ask for
    one (the exporter reads its endpoint, headers and protocol options from them too); once
    a process."""
    if _configured or not exporting():
        return bool(_configured)
    _configured.append(True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME", "htm"), "service.version": version}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True
