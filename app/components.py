"""The app's lifetime components: everything the composition root (app/lifespan.py) builds
once per process and closes at shutdown. Every way in reaches them through a unit of work
(app/unit.py); the HTTP layer keeps them on app.state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.auth.service import KeyCache
from app.cache import TtlCache
from app.clock import Clock
from app.config import Settings
from app.db.replicas import Replicas
from app.db.session import DatabaseErrors, Sessionmaker
from app.db.vectors import StoredVectors
from app.embeddings.timed import TimedEmbedder
from app.enrichment.worker import EnrichmentWorker
from app.invalidation import Invalidations
from app.llm.base import ChatModel
from app.maintenance.statistics import StatisticsWorker
from app.maintenance.worker import MaintenanceWorker
from app.memories.access import AccessTracker
from app.memories.adds import GroupCommit
from app.memories.embedding_worker import EmbeddingWorker
from app.metrics import Metrics
from app.recall.caches import SearchCaches
from app.rerank import HttpReranker
from app.retention.worker import RetentionWorker
from app.sessions.consolidation import SessionExpiryWorker
from app.sessions.hot import SessionHotStore
from app.stats.service import ServerFacts
from app.summaries.worker import EvictionSummaryWorker
from app.tokens import Tokenizer
from app.working_memory.loads import RecallLoader
from app.working_memory.protocol import TwoTier
from app.working_memory.repair import RepairWorker
from app.working_memory.store import WorkingMemoryStore


@dataclass
class Components:
    """Everything the app holds for its lifetime. Nothing connects at construction: the
    engine and the Redis client connect lazily, so the service starts (and /readyz says
    503) while a dependency is down."""

    settings: Settings
    engine: AsyncEngine
    sessionmaker: Sessionmaker
    redis: Any
    tokenizer: Tokenizer
    embedder: TimedEmbedder
    clock: Clock
    two_tier: TwoTier
    key_cache: KeyCache
    invalidations: Invalidations
    namespace_ids: TtlCache[str, int]
    vectors: StoredVectors
    search_caches: SearchCaches
    embedding_worker: EmbeddingWorker
    group_commit: GroupCommit
    access: AccessTracker
    repair_worker: RepairWorker
    recall_loads: RecallLoader
    session_hot: SessionHotStore
    session_worker: SessionExpiryWorker
    summary_worker: EvictionSummaryWorker
    server_facts: ServerFacts
    reranker: HttpReranker | None = None
    llm: ChatModel | None = None  # HTM_LLM_PROVIDER (app/llm); None: nothing is called
    enrichment_worker: EnrichmentWorker | None = None
    retention_worker: RetentionWorker | None = None
    maintenance_worker: MaintenanceWorker | None = None
    statistics_worker: StatisticsWorker | None = None
    replicas: Replicas | None = None  # HTM_DATABASE_REPLICA_URLS (app/db/replicas.py)
    metrics: Metrics = field(default_factory=Metrics)
    db_errors: DatabaseErrors = field(default_factory=DatabaseErrors)

    @property
    def working_memory(self) -> WorkingMemoryStore:
        return self.two_tier.store
