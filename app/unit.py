"""A unit of work: one caller's transaction and the services that work in it.

This is the one place where services are built, for every way in: the HTTP routes
(app/http/deps.py), the MCP tools (app/mcp), the CLI's commands (app/transfer) and
the background workers (sessions, summaries, enrichment). So a service's collaborators are
named once, as keyword arguments, and no way in can build a service without what another way
gives it (the CLI once skipped the robot-name rule that way). Each service is made on first
use and shared within the unit: the write protocol and the robot service are the same object
for every service of one request.

`unit_of_work(components, caller)` opens a session, yields the unit, commits on success and
rolls back on any error; a service that must commit part way (durable first, then working
memory; a robot's registration before the write it is for) does so through
`WriteProtocol.commit_durable`, and an add's strategy owns its transaction by name
(app/memories/adding.py: the plain one ends the request's, which only read, before the group
commit's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property

from app.auth.caller import Caller
from app.auth.service import ApiKeyService
from app.components import Components
from app.db.replicas import ReadFrom
from app.db.session import DbSession
from app.entities.repository import EntityRepository
from app.entities.service import EntityService
from app.facts.service import FactService
from app.groups.service import GroupService
from app.maintenance.service import MaintenanceService
from app.memories.merge import Merger
from app.memories.reads import MemoryReader
from app.memories.service import MemoryService
from app.memories.supersede import Detector
from app.memories.versions import VersionService
from app.namespaces.repository import NamespaceRepository
from app.pools.service import PoolService
from app.profiles.service import ProfileService
from app.prompt.service import PromptService
from app.recall.service import RecallService
from app.relationships.repository import LinkRepository
from app.relationships.service import LinkService
from app.retention.service import RetentionService
from app.robots.service import RobotService
from app.sessions.consolidation import Consolidator
from app.sessions.service import SessionService
from app.snapshots.service import SnapshotService
from app.state.service import StateService
from app.stats.service import StatsService
from app.tags.repository import TagRepository
from app.tags.service import TagService
from app.working_memory.model import Scope
from app.working_memory.protocol import WriteProtocol
from app.working_memory.service import WorkingMemoryService


class UnitOfWork:
    """The services of one caller's transaction (`session`), each built on first use."""

    def __init__(
        self,
        components: Components,
        caller: Caller,
        session: DbSession,
        reads: DbSession | None = None,
    ) -> None:
        self.components = components
        self.caller = caller
        self.session = session
        # Where the services that may read from a replica run their reads (app/db/replicas.py):
        # the primary session unless the way in asked for ReadFrom and replicas are configured.
        self.reads = reads or session

    @cached_property
    def two_tier(self) -> WriteProtocol:
        scope = Scope(self.caller.namespace_id, self.caller.namespace)
        return self.components.two_tier.protocol(self.session, scope)

    @cached_property
    def robots(self) -> RobotService:
        c = self.components
        return RobotService(
            session=self.session,
            namespace_id=self.caller.namespace_id,
            cache=c.two_tier.robots,
            default_budget=c.settings.working_memory_budget,
            two_tier=self.two_tier,
        )

    @cached_property
    def pools(self) -> PoolService:
        return PoolService(session=self.session, caller=self.caller, two_tier=self.two_tier)

    @cached_property
    def memories(self) -> MemoryService:
        c = self.components
        return MemoryService(
            session=self.session,
            caller=self.caller,
            robots=self.robots,
            two_tier=self.two_tier,
            embedder=c.embedder,
            tokenizer=c.tokenizer,
            settings=c.settings,
            clock=c.clock,
            adds=c.group_commit,
            vectors=c.vectors,
            search_caches=c.search_caches,
            pools=self.pools,
            access=c.access,
            llm=c.llm,
        )

    @cached_property
    def facts(self) -> FactService:
        return FactService(
            session=self.session,
            caller=self.caller,
            memories=self.memories,
            llm=self.components.llm,
        )

    @cached_property
    def reader(self) -> MemoryReader:
        c = self.components
        return MemoryReader(
            session=self.session,
            reads=self.reads,
            caller=self.caller,
            robots=self.robots,
            two_tier=self.two_tier,
            clock=c.clock,
            access=c.access,
        )

    @cached_property
    def versions(self) -> VersionService:
        return VersionService(session=self.session, caller=self.caller, memories=self.memories)

    @cached_property
    def merger(self) -> Merger:
        return Merger(service=self.memories)

    @cached_property
    def recall(self) -> RecallService:
        c = self.components
        return RecallService(
            session=self.session,
            reads=self.reads,
            caller=self.caller,
            robots=self.robots,
            two_tier=self.two_tier,
            embedder=c.embedder,
            caches=c.search_caches,
            settings=c.settings,
            clock=c.clock,
            pools=self.pools,
            reranker=c.reranker,
            recalled=c.metrics.recalled,
            accessed=c.access.record,
            loads=c.recall_loads,
        )

    @cached_property
    def working_memory(self) -> WorkingMemoryService:
        return WorkingMemoryService(protocol=self.two_tier, robots=self.robots)

    @cached_property
    def profiles(self) -> ProfileService:
        c = self.components
        return ProfileService(
            session=self.session,
            caller=self.caller,
            robots=self.robots,
            memories=self.memories,
            tokenizer=c.tokenizer,
            clock=c.clock,
        )

    @cached_property
    def snapshots(self) -> SnapshotService:
        return SnapshotService(
            session=self.session,
            caller=self.caller,
            robots=self.robots,
            two_tier=self.two_tier,
            clock=self.components.clock,
        )

    @cached_property
    def consolidator(self) -> Consolidator:
        c = self.components
        return Consolidator(
            session=self.session, memories=self.memories, hot=c.session_hot, settings=c.settings
        )

    @cached_property
    def sessions(self) -> SessionService:
        c = self.components
        return SessionService(
            session=self.session,
            caller=self.caller,
            robots=self.robots,
            hot=c.session_hot,
            breaker=c.two_tier.breaker,
            tokenizer=c.tokenizer,
            settings=c.settings,
            clock=c.clock,
            consolidator=self.consolidator,
            accessed=c.access.record_messages,
        )

    @cached_property
    def state(self) -> StateService:
        c = self.components
        return StateService(
            session=self.session,
            caller=self.caller,
            robots=self.robots,
            two_tier=self.two_tier,
            tokenizer=c.tokenizer,
            settings=c.settings,
            clock=c.clock,
        )

    @cached_property
    def prompt(self) -> PromptService:
        c = self.components
        return PromptService(
            robots=self.robots,
            working_memory=self.working_memory,
            recall=self.recall,
            sessions=self.sessions,
            profiles=self.profiles,
            state=self.state,
            tokenizer=c.tokenizer,
            settings=c.settings,
            session=self.session,
            llm=c.llm,
        )

    @cached_property
    def stats(self) -> StatsService:
        c = self.components
        return StatsService(
            session=self.session,
            reads=self.reads,
            caller=self.caller,
            robots=self.robots,
            working_memory=self.working_memory,
            clock=c.clock,
            query_cache=c.embedder.query_cache,
            facts=c.server_facts,
        )

    @cached_property
    def maintenance(self) -> MaintenanceService:
        c = self.components
        return MaintenanceService(
            session=self.session,
            caller=self.caller,
            memories=self.memories,
            merger=self.merger,
            retention=self.retention,
            detector=Detector.of(
                self.session,
                self.caller.namespace_id,
                c.settings,
                caches=c.search_caches,
                llm=c.llm,
            ),
            tokenizer=c.tokenizer,
            settings=c.settings,
            clock=c.clock,
            llm=c.llm,
        )

    @cached_property
    def retention(self) -> RetentionService:
        return RetentionService(
            session=self.session,
            caller=self.caller,
            memories=self.memories,
            pools=self.pools,
            clock=self.components.clock,
        )

    @cached_property
    def links(self) -> LinkService:
        return LinkService(repo=LinkRepository(self.session), namespace_id=self.caller.namespace_id)

    @cached_property
    def entities(self) -> EntityService:
        return EntityService(
            repo=EntityRepository(self.session),
            reads=EntityRepository(self.reads),
            namespace_id=self.caller.namespace_id,
            clock=self.components.clock,
        )

    @cached_property
    def tags(self) -> TagService:
        return TagService(
            repo=TagRepository(self.session),
            namespace_id=self.caller.namespace_id,
            robots=self.robots,
            clock=self.components.clock,
        )

    @cached_property
    def groups(self) -> GroupService:
        c = self.components
        return GroupService(
            session=self.session,
            caller=self.caller,
            two_tier=self.two_tier,
            robots=c.two_tier.robots,
            default_budget=c.settings.working_memory_budget,
        )

    @cached_property
    def keys(self) -> ApiKeyService:
        return ApiKeyService(
            session=self.session,
            namespace_id=self.caller.namespace_id,
            cache=self.components.key_cache,
        )


@asynccontextmanager
async def unit_of_work(
    components: Components, caller: Caller, read_from: ReadFrom | None = None
) -> AsyncIterator[UnitOfWork]:
    """A session that commits on success and rolls back on any error, and its services.
    `read_from`: the reads of recall, list, retrieve and stats may run on a replica."""
    session = components.sessionmaker()
    replicas = components.replicas
    reads = None if read_from is None or replicas is None else replicas.reads(session, read_from)
    try:
        yield UnitOfWork(components, caller, session, reads)
        await session.commit()
    except BaseException:
        await session.rollback()
        raise
    finally:
        try:
            if reads is not None:
                await reads.close()
        finally:
            await session.close()


async def operator(components: Components, namespace: str) -> Caller:
    """The namespace's admin: who the CLI and the workers act as. They run where the
    database's credentials are; the namespace is registered on first use (its name checked
    by the same rule as X-Namespace's)."""
    ns_id = await NamespaceRepository.resolve(
        components.sessionmaker, components.namespace_ids, namespace
    )
    return Caller(namespace_id=ns_id, namespace=namespace, role="admin")
