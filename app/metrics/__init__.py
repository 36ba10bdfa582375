"""Prometheus metrics: one registry per app (made by the composition root), exposed at
GET /metrics. Every figure is per process: run one scrape target per process (see README)."""

from app.metrics.registry import Metrics

__all__ = ["Metrics"]
