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

# Request latencies from a cached read (~1 ms) to a statement timeout (5 s) and beyond.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "htm_http_request_duration_seconds",
            "HTTP requests by method, route template and status, and how long they took",
            ["method", "route", "status"],
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
        self._request_children: dict[tuple[str, str, int], Any] = {}
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
        """One request's duration, under its labels. Each label set's child is kept here:
        `labels()` checks and joins the values and takes the metric's lock every time."""
        key = (method, route, status)
        child = self._request_children.get(key)
        if child is None:
            child = self.requests.labels(method, route, str(status))
            self._request_children[key] = child
        child.observe(seconds)
