"""What a request can be given, as FastAPI dependencies: the app's lifetime components
(made by the composition root, app/lifespan.py, and kept on app.state) and the per-request
objects built from them (the session, the caller, the write protocol, the robot service).

Routers ask for these by type; services receive them as constructor arguments, so a
service's signature says what it uses. Nothing in a domain package imports this module
except its router. Every dependency is an `async def`: FastAPI runs a plain `def` (or a
class) in a worker thread, a hand-off that costs more than what these do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from app.auth.caller import Caller, identify, require_role
from app.auth.service import KeyCache
from app.cache import TtlCache
from app.clock import Clock
from app.config import Settings
from app.db.session import DatabaseErrors, DbSession, Sessionmaker
from app.db.vectors import StoredVectors
from app.embeddings.timed import TimedEmbedder
from app.enrichment.worker import EnrichmentWorker
from app.llm.base import ChatModel
from app.memories.access import AccessTracker
from app.memories.adds import GroupCommit
from app.memories.embedding_worker import EmbeddingWorker
from app.metrics import Metrics
from app.recall.caches import SearchCaches
from app.rerank import HttpReranker
from app.robots.service import RobotService
from app.sessions.consolidation import SessionExpiryWorker
from app.sessions.hot import SessionHotStore
from app.stats.service import ServerFacts
from app.summaries.worker import EvictionSummaryWorker
from app.tokens import Tokenizer
from app.working_memory.model import Scope
from app.working_memory.protocol import TwoTier, WriteProtocol
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
    namespace_ids: TtlCache[str, int]
    vectors: StoredVectors
    search_caches: SearchCaches
    embedding_worker: EmbeddingWorker
    group_commit: GroupCommit
    access: AccessTracker
    repair_worker: RepairWorker
    session_hot: SessionHotStore
    session_worker: SessionExpiryWorker
    summary_worker: EvictionSummaryWorker
    server_facts: ServerFacts
    reranker: HttpReranker | None = None
    llm: ChatModel | None = None  # HTM_LLM_PROVIDER (app/llm); None: nothing is called
    enrichment_worker: EnrichmentWorker | None = None
    metrics: Metrics = field(default_factory=Metrics)
    db_errors: DatabaseErrors = field(default_factory=DatabaseErrors)

    @property
    def working_memory(self) -> WorkingMemoryStore:
        return self.two_tier.store


async def get_components(request: Request) -> Components:
    return request.app.state.components  # type: ignore[no-any-return]


ComponentsDep = Annotated[Components, Depends(get_components)]


async def get_key_cache(c: ComponentsDep) -> KeyCache:
    return c.key_cache


KeyCacheDep = Annotated[KeyCache, Depends(get_key_cache)]


async def get_session(c: ComponentsDep) -> AsyncIterator[DbSession]:
    """One session per request (it checks a connection out on first use): commit on success,
    roll back on any error."""
    session = c.sessionmaker()
    try:
        yield session
        await session.commit()
    except BaseException:
        await session.rollback()
        raise
    finally:
        await session.close()


# scope="function": the commit happens before the response is sent, so a client never gets
# a 2xx for a change that then fails to commit (FastAPI's default runs it afterwards).
SessionDep = Annotated[DbSession, Depends(get_session, scope="function")]


async def get_caller(
    request: Request,
    c: ComponentsDep,
    x_namespace: Annotated[
        str | None,
        Header(description="Namespace to act in when auth is off (default: `default`)"),
    ] = None,
) -> Caller:
    """Who calls, and whether the method is allowed to them (app/auth/caller.py)."""
    return await _caller(request, c, x_namespace)


async def identify_first(request: Request) -> None:
    """With auth on, identify the caller before the route reads its body (app/routing.py):
    401 or 403 without holding a body the client was never allowed to send."""
    c: Components = request.app.state.components
    if c.settings.auth_enabled:
        await _caller(request, c, request.headers.get("x-namespace"))


async def _caller(request: Request, c: Components, x_namespace: str | None) -> Caller:
    # Identified once per request: kept in the scope's state by whichever asks first.
    state = request.scope.setdefault("state", {})
    caller = state.get("caller")
    if caller is None:
        caller = await identify(
            request.headers.get("authorization", ""),
            x_namespace,
            auth_enabled=c.settings.auth_enabled,
            sessionmaker=c.sessionmaker,
            namespace_ids=c.namespace_ids,
            key_cache=c.key_cache,
        )
        state["caller"] = caller
        state["namespace"] = caller.namespace  # for the request's log line
    return require_role(caller, "reader" if request.method in READ_METHODS else "writer")


READ_METHODS = {"GET", "HEAD", "OPTIONS"}
CallerDep = Annotated[Caller, Depends(get_caller)]


async def get_admin(caller: CallerDep) -> Caller:
    return require_role(caller, "admin")


AdminDep = Annotated[Caller, Depends(get_admin)]


async def get_writer(caller: CallerDep) -> Caller:
    """For a GET that writes (a session window's read refreshes the session)."""
    return require_role(caller, "writer")


WriterDep = Annotated[Caller, Depends(get_writer)]


@dataclass(frozen=True)
class RequestScope:
    """One request's session and caller, the app's components, and the two objects every
    domain service of the request shares: the write protocol and the robot service. One
    dependency instead of one per component: FastAPI's resolution of each costs CPU on every
    request."""

    session: DbSession
    caller: Caller
    components: Components
    two_tier: WriteProtocol
    robots: RobotService


async def get_scope(session: SessionDep, caller: CallerDep, c: ComponentsDep) -> RequestScope:
    two_tier = c.two_tier.protocol(session, Scope(caller.namespace_id, caller.namespace))
    robots = RobotService(
        session, caller.namespace_id, c.two_tier.robots, c.settings.working_memory_budget, two_tier
    )
    return RequestScope(session, caller, c, two_tier, robots)


ScopeDep = Annotated[RequestScope, Depends(get_scope)]
