"""Prometheus metrics: one registry per app (made by the composition root), exposed at
GET /metrics. Every figure is per process: run one scrape target per process
(docs/operations.md, "Metrics and logs")."""

from app.metrics.registry import Metrics

__all__ = ["Metrics"]
