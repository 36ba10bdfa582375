"""Figures the components keep themselves, read at scrape time: nothing on a hot path pays
for a Prometheus call, and the counters stay plain integers owned by what counts them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from app.cache import TtlCache
from app.db.replicas import Replicas
from app.db.session import DatabaseErrors
from app.embeddings.timed import TimedEmbedder
from app.memories.adds import GroupCommit
from app.tracing import BUCKETS, DEPENDENCIES, TIMINGS
from app.working_memory.protocol import TwoTier


@dataclass
class EmbeddingQueue:
    """The embedding worker's backlog as last read (app/metrics/service.py, at each scrape)."""

    pending: int
    lag_s: float


@dataclass
class Sources:
    engine: AsyncEngine
    db_errors: DatabaseErrors
    two_tier: TwoTier
    embedder: TimedEmbedder
    group_commit: GroupCommit
    caches: Mapping[str, TtlCache[Any, Any]]
    # (maintenance runs finished, of which failed) in this process; None: no worker
    maintenance: Callable[[], tuple[int, int]] | None = None
    replicas: Replicas | None = None  # HTM_DATABASE_REPLICA_URLS


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _replica_metrics(replicas: Replicas) -> Iterator[Metric]:
    reads = CounterMetricFamily(
        "htm_replica_reads",
        "Units of work whose reads could use a replica, by what served them",
        labels=["served"],
    )
    for served, n in sorted(replicas.served.items()):
        reads.add_metric([served], n)
    yield reads
    up = GaugeMetricFamily("htm_replica_up", "1: the replica serves reads", labels=["replica"])
    lag = GaugeMetricFamily(
        "htm_replica_lag_seconds", "The replica's lag at its last check", labels=["replica"]
    )
    for r in replicas.replicas:
        up.add_metric([r.name], float(r.up))
        lag.add_metric([r.name], r.lag_s)
    yield up
    yield lag


class SourcesCollector(Collector):
    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.queue: EmbeddingQueue | None = None  # None: the database did not answer

    def collect(self) -> Iterator[Metric]:
        yield from self._adds()
        yield from self._working_memory()
        yield from self._dependencies()
        yield from self._database()
        yield from self._replicas()
        yield from self._caches()
        yield from self._embedding_queue()

    def _adds(self) -> Iterator[Metric]:
        adds = self.sources.group_commit
        yield _counter("htm_memories_added", "Memories stored by adds and batches", adds.memories)
        yield _counter("htm_add_requests", "Adds (a batch is one) committed", adds.adds)
        yield _counter("htm_add_commits", "Group-commit transactions of adds", adds.commits)

    def _working_memory(self) -> Iterator[Metric]:
        two_tier = self.sources.two_tier
        counts = two_tier.counts
        yield _counter(
            "htm_working_memory_evictions", "Memories evicted from working memory", counts.evictions
        )
        yield _counter(
            "htm_working_memory_rebuilds",
            "Working memories rebuilt from the PostgreSQL mirror",
            counts.rebuilds,
        )
        yield _gauge(
            "htm_working_memory_repair_queue",
            "Robots queued in this process for the repair worker",
            len(two_tier.repairs.robots),
        )

    def _dependencies(self) -> Iterator[Metric]:
        """The calls to each dependency, and what failed of them."""
        s = self.sources
        yield _counter(
            "htm_embedding_failures",
            "Embedding provider calls that failed or timed out",
            s.embedder.failures,
        )
        deps = HistogramMetricFamily(
            "htm_dependency_seconds",
            "Calls to PostgreSQL, Redis, the embedder, the LLM and the reranker, and how long "
            "they took (app/tracing.py)",
            labels=["dependency"],
        )
        for name in DEPENDENCIES:
            calls, cumulative = 0, []
            for bound, n in zip([*map(str, BUCKETS), "+Inf"], TIMINGS.buckets[name], strict=True):
                calls += n
                cumulative.append((bound, float(calls)))
            deps.add_metric([name], cumulative, TIMINGS.sums[name])
        yield deps
        if s.maintenance is not None:
            runs, failed = s.maintenance()
            yield _counter("htm_maintenance_runs", "Scheduled maintenance runs finished", runs)
            yield _counter("htm_maintenance_failures", "Of those, the runs that failed", failed)
        yield _counter("htm_redis_errors", "Redis failures (each skips Redis briefly)",
                       s.two_tier.breaker.failures)  # fmt: skip

    def _database(self) -> Iterator[Metric]:
        s = self.sources
        db = CounterMetricFamily(
            "htm_postgres_errors", "PostgreSQL failures answered as 503, by kind", labels=["kind"]
        )
        db.add_metric(["unavailable"], s.db_errors.unavailable)
        db.add_metric(["timeout"], s.db_errors.timeouts)
        yield db
        pool: Any = s.engine.pool
        yield _gauge(
            "htm_db_pool_connections_in_use", "Pooled connections checked out", pool.checkedout()
        )
        yield _gauge("htm_db_pool_size", "The pool's size (HTM_DB_POOL_SIZE)", pool.size())

    def _embedding_queue(self) -> Iterator[Metric]:
        if self.queue is not None:
            yield _gauge(
                "htm_embedding_queue_depth",
                "Memories waiting for an embedding (pending)",
                self.queue.pending,
            )
            yield _gauge(
                "htm_embedding_worker_lag_seconds",
                "How long the longest-waiting pending memory has been due",
                self.queue.lag_s,
            )

    def _replicas(self) -> Iterator[Metric]:
        if self.sources.replicas is not None:
            yield from _replica_metrics(self.sources.replicas)

    def _caches(self) -> Iterator[Metric]:
        hits = CounterMetricFamily("htm_cache_hits", "Cache lookups answered", labels=["cache"])
        misses = CounterMetricFamily(
            "htm_cache_misses", "Cache lookups not answered (absent or expired)", labels=["cache"]
        )
        entries = GaugeMetricFamily("htm_cache_entries", "Entries held", labels=["cache"])
        for name, cache in sorted(self.sources.caches.items()):
            hits.add_metric([name], cache.hits)
            misses.add_metric([name], cache.misses)
            entries.add_metric([name], len(cache))
        queries = self.sources.embedder.query_cache
        hits.add_metric(["query_embeddings"], queries.hits)
        misses.add_metric(["query_embeddings"], queries.misses)
        entries.add_metric(["query_embeddings"], len(queries))
        yield from (hits, misses, entries)
