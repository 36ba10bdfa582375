"""The app's metrics: its own CollectorRegistry (never prometheus_client's global one, so two
apps in one process, as in the tests, count apart), the request histogram and the counters
incremented where things happen. Figures kept by the components themselves (adds, evictions,
cache hits...) are read at scrape time by app/metrics/collector.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
)

from app import VERSION

# A `_created` series per counter and histogram doubles what a scrape carries for a
# timestamp Prometheus does not use.
disable_created_metrics()

if TYPE_CHECKING:
    from app.metrics.collector import SourcesCollector

# Request latencies as this service has them (bench/results/latest.md): a health check
# ~0.5 ms, reads and context 3-8 ms, recalls and adds 6-20 ms at one client, 20-160 ms p99
# at eight, a prompt 30 ms to 1 s, a batch of 100 0.2-2 s; 5 s is the statement timeout.
# Nine buckets (with +Inf) for each method and route; the status is the counter's label
# only: with it, each status of each route carried a histogram of its own, and a scrape
# after a walk through every route was 1,667 samples (1,344 of them buckets), 193 KB.
DURATION_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "htm_http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.durations = Histogram(
            "htm_http_request_duration_seconds",
            "How long HTTP requests took, by method and route template (any status)",
            ["method", "route"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.recalls = Counter(
            "htm_recalls",
            "Recalls answered, by strategy",
            ["strategy"],
            registry=self.registry,
        )
        # (method, route template, status): at most what the routes and statuses make.
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.sources: SourcesCollector | None = None
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds... (Linux)
        ProcessCollector(registry=self.registry)
        Info("htm_build", "The service's version", registry=self.registry).info(
            {"version": VERSION}
        )

    def watch(self, sources: SourcesCollector) -> None:
        """Read the components' own figures at each scrape (done once, by the lifespan)."""
        self.sources = sources
        self.registry.register(sources)

    def recalled(self, strategy: str) -> None:
        self.recalls.labels(strategy).inc()

    def request_took(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request: counted under its status, its duration under its method and route.
        Each label set's children are kept here: `labels()` checks and joins the values and
        takes the metric's lock every time."""
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = (
                self.requests.labels(method, route, str(status)),
                self.durations.labels(method, route),
            )
            self._request_children[key] = children
        count, duration = children
        count.inc()
        duration.observe(seconds)
