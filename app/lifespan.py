"""The composition root: the one place that builds the process's lifetime components
(`open_components`, for `htm serve` and the commands alike) and closes them in order, and the
background workers a serving process runs (`background`). Only the entry points (app/main.py,
app/cli.py) import this module."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.maint_notifications import MaintNotificationsConfig
from sqlalchemy.ext.asyncio import AsyncEngine

from app import VERSION, tracing
from app.auth.caller import Caller
from app.auth.service import KeyCache
from app.cache import TtlCache
from app.clock import Clock
from app.components import Components
from app.config import Settings
from app.db.engine import create_engine
from app.db.event_log import apply_event_log_policy
from app.db.jobs import exclusive
from app.db.replicas import Replicas, open_replicas
from app.db.session import DatabaseErrors, Sessionmaker, create_sessionmaker
from app.db.vectors import StoredVectors, newest_embedding_model, stored_dimension
from app.embeddings.base import DimensionMismatch
from app.embeddings.query_cache import QueryEmbeddingCache
from app.embeddings.timed import TimedEmbedder
from app.enrichment.worker import EnrichmentWorker
from app.errors import ServiceUnavailable
from app.invalidation import Invalidations
from app.llm.base import ChatModel
from app.llm.factory import build_llm
from app.maintenance.statistics import StatisticsWorker
from app.maintenance.worker import CHECK_S as MAINTENANCE_CHECK_S
from app.maintenance.worker import MaintenanceWorker
from app.memories.access import AccessTracker
from app.memories.adds import GroupCommit, statement_chars
from app.memories.embedding_worker import EmbeddingWorker
from app.memories.units import MemoryUnits
from app.metrics.collector import Sources, SourcesCollector
from app.recall.caches import PgvectorVersions, SearchCaches
from app.rerank import HttpReranker
from app.retention.worker import RetentionWorker
from app.sessions.consolidation import SessionExpiryWorker
from app.sessions.hot import SessionHotStore
from app.stats.service import ServerFacts
from app.summaries.worker import EvictionSummaryWorker
from app.tokens import Tokenizer
from app.unit import UnitOfWork, unit_of_work
from app.workers import periodic
from app.working_memory.loads import RecallLoader
from app.working_memory.model import ClusterConnection, RedisBreaker, RepairQueue
from app.working_memory.protocol import TwoTier
from app.working_memory.repair import RepairWorker
from app.working_memory.robots import RobotCache
from app.working_memory.store import WorkingMemoryStore

log = logging.getLogger(__name__)

# While the Redis breaker is open, a PING this often closes it as soon as Redis answers.
REDIS_PROBE_S = 0.1

# Namespaces are never renamed or deleted through the API; the TTL only bounds how long a
# namespace deleted by hand keeps being answered from this process.
NAMESPACE_IDS_TTL_S = 3600.0
NAMESPACE_IDS_MAX = 10_000


def cross_process(settings: Settings, robots: RobotCache, keys: KeyCache) -> Invalidations:
    """The invalidation channel (app/invalidation) wired to the caches a change in another
    process makes stale: a robot's row (its budget, group, stale flag, removal) and API keys
    (a revocation)."""
    invalidations = Invalidations(settings.redis_url, settings.redis_timeout_s)
    invalidations.register("robot", lambda p: robots.drop(p[0], p[1]), robots.clear)
    invalidations.register("keys", lambda _: keys.clear(), keys.clear)
    robots.announce = lambda namespace_id, name: invalidations.announce(
        "robot", [namespace_id, name]
    )
    keys.announce = lambda: invalidations.announce("keys")
    return invalidations


def create_redis(settings: Settings) -> Any:
    if not settings.redis_url:
        raise RuntimeError("HTM_REDIS_URL is not set; `htm serve` starts an embedded Redis")
    # Short timeouts: when Redis is down, requests degrade quickly instead of hanging.
    opts: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": settings.redis_timeout_s,
        "socket_timeout": settings.redis_timeout_s,
        # After Redis restarts, the pool holds connections the old server closed. redis-py 8
        # checks a connection for that when handing it out, except while its "maintenance
        # notifications" are on, which RESP3 turns on by default (redis-py #4252; fixed by
        # #4260, not in 8.1.0): so each such connection failed one request ("Connection
        # closed by server") and tripped the breaker, for as long as old ones came up.
        # Nothing here uses those notifications (Redis Enterprise's): off.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
        # And a connection that dies between that check and its command is replaced by one
        # immediate retry on a new connection. Only on ConnectionError: after a timeout the
        # command may have run, and a script must not run twice.
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    }
    if settings.redis_cluster:
        from redis.asyncio.cluster import RedisCluster

        cluster = RedisCluster.from_url(settings.redis_url, **opts)
        # RedisCluster takes no connection class: the nodes' (those found later too) is set.
        cluster.nodes_manager.connection_kwargs["connection_class"] = ClusterConnection
        for node in cluster.nodes_manager.startup_nodes.values():
            node.connection_class = ClusterConnection
        return cluster
    return aioredis.from_url(settings.redis_url, **opts)


async def build_embedder(settings: Settings, *, lazy: bool = False) -> TimedEmbedder:
    """The configured provider; when it fails to load, the service still starts: memories
    are stored as 'pending' and /readyz says why. `lazy`: the local model loads on its
    first embed."""
    embedder, error = None, None
    if settings.embedding_provider != "none":
        from app.embeddings.factory import build_embedder as build

        try:
            embedder = await build(settings, lazy=lazy)
        except DimensionMismatch:
            raise  # a misconfiguration, not an outage: refuse to start
        except Exception as exc:
            error = f"embedding provider {settings.embedding_provider!r} failed to load: {exc}"
            log.error(error)
    return TimedEmbedder(
        embedder,
        settings.embedding_timeout_s,
        provider=settings.embedding_provider,
        load_error=error,
        query_cache=QueryEmbeddingCache(settings.query_embedding_cache_size),
    )


def build_reranker(settings: Settings) -> HttpReranker | None:
    if settings.rerank_url is None:
        return None
    key = settings.rerank_api_key
    return HttpReranker(
        settings.rerank_url,
        api=settings.rerank_api,
        model=settings.rerank_model,
        api_key=key.get_secret_value() if key else None,
        timeout_s=settings.rerank_timeout_s,
    )


async def with_stored_runtime(sessionmaker: Sessionmaker, settings: Settings) -> Settings:
    """`settings` with the local model's `auto` runtime decided for this database
    (app/embeddings/factory.py `stored_runtime`: a database embedded by the float model stays
    on it). A database that cannot be reached now, or is not migrated, decides nothing."""
    from app.embeddings.factory import stored_runtime

    if settings.embedding_provider != "local" or settings.embedding_runtime != "auto":
        return settings
    try:
        async with sessionmaker() as session:
            if await stored_dimension(session) is None:
                return settings
            newest = await newest_embedding_model(session)
    except (ServiceUnavailable, OSError) as exc:
        log.warning("the embedding runtime was not checked against the database: %s", exc)
        return settings
    return stored_runtime(settings, newest)


async def check_dimension(
    sessionmaker: Sessionmaker, settings: Settings, embedder: TimedEmbedder
) -> None:
    """Refuse to start when the database stores vectors of another size than the model (or
    HTM_EMBEDDING_DIMENSION) makes. A database that cannot be reached now is checked by
    nothing: the service starts and answers 503 until it is back (readiness says so)."""
    try:
        async with sessionmaker() as session:
            stored = await stored_dimension(session)
    except (ServiceUnavailable, OSError) as exc:
        log.warning("embedding dimension not checked: %s", exc)
        return
    if stored is None:
        return  # not migrated yet
    made = {"HTM_EMBEDDING_DIMENSION": settings.embedding_dimension}
    if embedder.embedder is not None:
        made[f"the embedding model {embedder.embedder.model!r}"] = embedder.embedder.dimension
    for what, dimension in made.items():
        if dimension != stored:
            raise DimensionMismatch(
                f"{what} is {dimension}-dimensional, but this database stores "
                f"{stored}-dimensional vectors (memory.embedding): use the model the database "
                f"was built with, or a new database migrated with HTM_EMBEDDING_DIMENSION="
                f"{dimension}"
            )


def watch(c: Components) -> None:
    """/metrics reads these components' own counters at each scrape."""
    caches: dict[str, TtlCache[Any, Any]] = {
        "namespace_ids": c.namespace_ids,
        **c.key_cache.caches(),
        "robots": c.two_tier.robots.cache,
        "vector_storage": c.vectors.cache,
        "speakers": c.search_caches.speakers.cache,
    }
    c.metrics.watch(
        SourcesCollector(
            Sources(
                c.engine,
                c.db_errors,
                c.two_tier,
                c.embedder,
                c.group_commit,
                caches,
                _maintenance_counts(c.maintenance_worker),
                c.replicas,
            )
        )
    )


def _maintenance_counts(
    worker: MaintenanceWorker | None,
) -> Callable[[], tuple[int, int]] | None:
    if worker is None:
        return None
    return lambda: (worker.runs, worker.failed)


class Connections(NamedTuple):
    """What the other components are built on: the database, Redis and the embedder."""

    engine: AsyncEngine
    db_errors: DatabaseErrors
    sessionmaker: Sessionmaker
    redis: Any
    embedder: TimedEmbedder


@asynccontextmanager
async def open_components(
    settings: Settings, *, lazy_model: bool = False
) -> AsyncIterator[Components]:
    """`lazy_model`: the local model loads on its first embed, not here (the commands)."""
    tracing.configure(VERSION)  # OTLP export when the OTEL_* variables ask for it
    connections = await connect(settings, lazy_model=lazy_model)
    try:
        await apply_event_log_policy(connections.sessionmaker, settings.event_retention_days)
    except Exception:  # the service runs without the policies; said once, with why
        log.exception("the event log's TimescaleDB policies could not be set")
    components = assemble(settings, connections, lazy=lazy_model)
    watch(components)
    try:
        yield components
    finally:
        await close(components)


async def connect(settings: Settings, *, lazy_model: bool) -> Connections:
    """The engine, the Redis client and the embedder, the database's vector size checked
    against the embedder's (closed again when it differs)."""
    engine = create_engine(settings)
    db_errors = DatabaseErrors()
    sessionmaker = create_sessionmaker(engine, db_errors)
    redis = create_redis(settings)
    embedder = await build_embedder(
        await with_stored_runtime(sessionmaker, settings), lazy=lazy_model
    )
    try:
        await check_dimension(sessionmaker, settings, embedder)
    except BaseException:
        await embedder.aclose()
        await redis.aclose()
        await engine.dispose()
        raise
    return Connections(engine, db_errors, sessionmaker, redis, embedder)


def assemble(settings: Settings, connections: Connections, *, lazy: bool = False) -> Components:
    """Every other lifetime component, built on the connections (nothing here connects). The
    workers that write memories open units of work of their own (`units`), as a request does.
    `lazy` (the commands): the tokenizer reads its file on first use, as the model loads."""
    engine, db_errors, sessionmaker, redis, embedder = connections
    clock = Clock()
    vectors = StoredVectors()  # memory.embedding's type, read from the catalog
    two_tier = build_two_tier(settings, redis, clock)
    tokenizer = Tokenizer.load(settings.tiktoken_encoding, lazy=lazy)
    llm = build_llm(settings)
    key_cache = KeyCache()
    search_caches = SearchCaches(pgvector=PgvectorVersions(), vectors=vectors)

    def units(caller: Caller) -> AbstractAsyncContextManager[UnitOfWork]:
        return unit_of_work(components, caller)  # bound below, before any worker runs

    components = Components(
        settings=settings,
        engine=engine,
        sessionmaker=sessionmaker,
        redis=redis,
        tokenizer=tokenizer,
        embedder=embedder,
        clock=clock,
        two_tier=two_tier,
        key_cache=key_cache,
        invalidations=cross_process(settings, two_tier.robots, key_cache),
        namespace_ids=TtlCache(NAMESPACE_IDS_TTL_S, NAMESPACE_IDS_MAX),
        vectors=vectors,
        search_caches=search_caches,
        embedding_worker=EmbeddingWorker(
            sessionmaker, embedder, settings.embedding_batch_size, vectors, settings.embed_text
        ),
        group_commit=build_group_commit(settings, sessionmaker, vectors),
        access=AccessTracker(sessionmaker, settings.importance_learning_rate),
        repair_worker=RepairWorker(sessionmaker, two_tier),
        recall_loads=RecallLoader(
            sessionmaker, two_tier, deadline_s=settings.recall_load_deadline_s
        ),
        session_hot=SessionHotStore(redis),
        session_worker=SessionExpiryWorker(sessionmaker=sessionmaker, units=units, clock=clock),
        retention_worker=RetentionWorker(sessionmaker=sessionmaker, units=units),
        maintenance_worker=MaintenanceWorker(sessionmaker=sessionmaker, units=units, clock=clock),
        statistics_worker=StatisticsWorker(
            sessionmaker=sessionmaker,
            caches=search_caches,
            min_changed=settings.analyze_min_changed_rows,
        ),
        summary_worker=build_summary_worker(
            settings, sessionmaker, units, tokenizer=tokenizer, llm=llm
        ),
        llm=llm,
        enrichment_worker=build_enrichment_worker(settings, sessionmaker, units, llm),
        reranker=build_reranker(settings),
        server_facts=ServerFacts(),
        db_errors=db_errors,
        replicas=build_replicas(settings, sessionmaker),
    )
    return components


def build_two_tier(settings: Settings, redis: Any, clock: Clock) -> TwoTier:
    """The write protocol's two tiers: Redis working memory, its breaker, the robots' cache."""
    return TwoTier(
        store=WorkingMemoryStore(redis),
        breaker=RedisBreaker(settings.redis_retry_after_s),
        robots=RobotCache(),
        repairs=RepairQueue(),
        default_budget=settings.working_memory_budget,
        clock=clock,
    )


def build_group_commit(
    settings: Settings, sessionmaker: Sessionmaker, vectors: StoredVectors
) -> GroupCommit:
    return GroupCommit(
        sessionmaker,
        vectors,
        settings.group_commit_max_rows,
        settings.llm_provider != "none",
        settings.group_commit_flushes,
        statement_chars(settings.statement_timeout_ms),
    )


def build_summary_worker(
    settings: Settings,
    sessionmaker: Sessionmaker,
    units: MemoryUnits,
    *,
    tokenizer: Tokenizer,
    llm: ChatModel | None,
) -> EvictionSummaryWorker:
    return EvictionSummaryWorker(
        sessionmaker=sessionmaker,
        units=units,
        tokenizer=tokenizer,
        default_budget=settings.working_memory_budget,
        target_tokens=settings.summary_target_tokens,
        llm=llm,
    )


def build_enrichment_worker(
    settings: Settings,
    sessionmaker: Sessionmaker,
    units: MemoryUnits,
    llm: ChatModel | None,
) -> EnrichmentWorker | None:
    """None without an LLM: nothing to enrich with."""
    if llm is None:
        return None
    return EnrichmentWorker(
        sessionmaker=sessionmaker,
        units=units,
        llm=llm,
        min_tokens=settings.enrich_propositions_min_tokens,
        max_tags=settings.max_tags,
        llm_timeout_s=settings.llm_timeout_s,
    )


def build_replicas(settings: Settings, sessionmaker: Sessionmaker) -> Replicas | None:
    return open_replicas(
        settings.database_replica_urls,
        sessionmaker,
        lambda url: create_engine(settings, replica_url=url),
        create_sessionmaker,
        max_lag_s=settings.replica_max_lag_s,
        wait_s=settings.replica_wait_s,
    )


async def close(c: Components) -> None:
    """In order: what is still queued or unannounced is written first, the connections last."""
    # The recall loads answered `pending` (app/working_memory/loads.py) are applied first.
    await c.recall_loads.drain(c.settings.recall_load_deadline_s)
    await c.group_commit.aclose()
    await c.invalidations.aclose()  # what this process announced last (a CLI's revoke)
    try:  # the last interval's access counts
        await c.access.flush()
    except Exception as exc:
        log.warning("access counts not written at shutdown: %s", exc)
    if c.reranker is not None:
        await c.reranker.aclose()
    if c.llm is not None:
        await c.llm.aclose()
    await c.embedder.aclose()
    await c.redis.aclose()
    if c.replicas is not None:
        await c.replicas.aclose()
    await c.engine.dispose()


# A background worker: its name, its pass, how often (s), and whether the first waits.
Job = tuple[str, Callable[[], Awaitable[Any]], float, bool]


@asynccontextmanager
async def background(components: Components) -> AsyncIterator[None]:
    """The background workers of a serving process, each a periodic task (app/workers.py),
    stopped (cancelled) when this exits: the embedding worker's leased rows come back when
    their lease ends."""
    async with AsyncExitStack() as running:
        for name, run, every_s, delay_first in jobs(components):
            await running.enter_async_context(periodic(name, run, every_s, delay_first=delay_first))
        yield


def jobs(c: Components) -> list[Job]:
    """The serving process's workers; those not configured are left out."""
    settings, breaker, redis = c.settings, c.two_tier.breaker, c.redis
    jobs: list[Job] = [
        # Not periodic: one task, subscribed until cancelled (app/invalidation).
        ("invalidation listener", c.invalidations.listen, 0.0, False),
        ("redis probe", lambda: breaker.probe(redis.ping), REDIS_PROBE_S, False),
        (
            "working-memory repair",
            c.repair_worker.run_once,
            settings.working_memory_repair_interval_s,
            True,
        ),
        ("session expiry", c.session_worker.run_once, settings.session_expiry_interval_s, True),
        ("access counts", c.access.flush, settings.access_flush_interval_s, True),
        (
            "eviction summaries",
            exclusive(c.engine, "eviction summaries", c.summary_worker.run_once),
            settings.summary_interval_s,
            True,
        ),
    ]
    # One process at a time runs these passes (app/db/jobs.exclusive); the others share
    # their work row by row (SKIP LOCKED, leases) or keep per-process state.
    if c.retention_worker is not None and settings.retention_interval_s > 0:
        retention = exclusive(c.engine, "retention", c.retention_worker.run_once)
        jobs.append(("retention", retention, settings.retention_interval_s, True))
    if c.maintenance_worker is not None:
        maintenance = exclusive(c.engine, "maintenance", c.maintenance_worker.run_once)
        jobs.append(("maintenance", maintenance, MAINTENANCE_CHECK_S, True))
    if c.statistics_worker is not None and settings.analyze_interval_s > 0:
        analyze = exclusive(c.engine, "statistics", c.statistics_worker.run_once)
        jobs.append(("statistics", analyze, settings.analyze_interval_s, True))
    if c.enrichment_worker is not None:  # an LLM is configured
        jobs.append(
            ("llm enrichment", c.enrichment_worker.run_once, settings.enrich_interval_s, True)
        )
    if c.embedder.available:
        interval_s = settings.embedding_worker_interval_s
        jobs.append(("embedding worker", c.embedding_worker.drain, interval_s, False))
    return jobs
