"""A scrape: refresh what needs the database, then render the registry."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.db.session import Sessionmaker
from app.errors import ServiceUnavailable
from app.metrics.collector import EmbeddingQueue
from app.metrics.registry import Metrics
from app.metrics.repository import MetricsRepository

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
# A scrape must answer while PostgreSQL does not: the backlog gauges are left out then.
QUEUE_TIMEOUT_S = 1.0


async def _queue(sessionmaker: Sessionmaker) -> EmbeddingQueue:
    async with sessionmaker() as session:
        pending, lag_s = await MetricsRepository(session).embedding_queue()
    return EmbeddingQueue(pending, lag_s)


async def scrape(sessionmaker: Sessionmaker, metrics: Metrics) -> bytes:
    """The registry in Prometheus' text format, its embedding backlog read first (left out
    while PostgreSQL does not answer within QUEUE_TIMEOUT_S)."""
    sources = metrics.sources
    if sources is not None:
        try:
            sources.queue = await asyncio.wait_for(_queue(sessionmaker), QUEUE_TIMEOUT_S)
        except (ServiceUnavailable, TimeoutError, OSError) as exc:
            log.warning("metrics: embedding backlog not read: %s", exc)
            sources.queue = None
    return generate_latest(metrics.registry)
