"""The rules of the long-term tier: durable first, then working memory."""

from __future__ import annotations

import contextlib
import logging
from types import EllipsisType
from typing import Any, NamedTuple

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings, VectorStorage
from app.db.session import DbSession
from app.db.vectors import StoredVectors, check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import Conflict, NotFound, RemovedMeanwhile
from app.events.repository import EventRepository
from app.llm.base import ChatModel
from app.memories.access import AccessTracker
from app.memories.adding import AddPreparation, PlainAdds, Prepared, Registration
from app.memories.adds import GroupCommit
from app.memories.audiences import Audiences
from app.memories.dedupe import DuplicateAdds, may_duplicate, nearest_of_type, rules_for_adds
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.forgetting import Forgetting
from app.memories.limits import check_fields, check_validity
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import (
    ImportanceChange,
    MemoryAdded,
    MemoryCreate,
    MemoryFields,
    MemoryRead,
)
from app.memories.search_text import (
    Written,
    same_vector_input,
    search_texts,
    vector_input,
)
from app.memories.supersede import (
    Detector,
    SupersedingAdds,
    check_covers,
    proposing,
    supersessions,
)
from app.memories.supersede_repository import SupersedeRepository
from app.memories.turn_repository import TurnRepository
from app.memories.writes import AddStrategy, Committed, MemoryWrites, fields_of, key_taken
from app.pools.service import PoolService
from app.recall.caches import SearchCaches
from app.recall.search import Search
from app.robots.service import Robot, RobotService
from app.tokens import Tokenizer
from app.visibility import Audience, Reader
from app.working_memory.protocol import WriteProtocol

log = logging.getLogger(__name__)

# A PUT retries its lock-or-create step this often when the key keeps appearing and
# disappearing under it (concurrent creates and hard deletes of the same key).
UPSERT_ATTEMPTS = 5


class _Put(NamedTuple):
    """A PUT's body (with its speaker's tag) and what was worked out for it before any lock."""

    body: MemoryFields
    text: str | None
    vector: list[float] | None
    model: str | None
    tokens: int


class MemoryService:
    def __init__(
        self,
        *,
        session: DbSession,
        caller: Caller,
        robots: RobotService,
        two_tier: WriteProtocol,
        embedder: TimedEmbedder,
        tokenizer: Tokenizer,
        settings: Settings,
        clock: Clock,
        adds: GroupCommit,
        vectors: StoredVectors,
        search_caches: SearchCaches,
        pools: PoolService,
        access: AccessTracker,
        llm: ChatModel | None = None,
    ) -> None:
        self.llm = llm
        self.audiences = Audiences(pools)
        self.adds = adds
        self.search_caches = search_caches
        self.vectors = vectors
        self.session = session
        self.caller = caller
        self.robots = robots
        self.two_tier = two_tier
        self.embedder = embedder
        self.tokenizer = tokenizer
        self.settings = settings
        self.clock = clock
        self.repo = MemoryRepository(session)
        self.turns = TurnRepository(session)
        self.events = EventRepository(session, clock)
        self.writes = MemoryWrites(session, caller, two_tier, clock, adds, vectors)
        self.forgetting = Forgetting(
            caller=caller,
            robots=robots,
            repo=self.repo,
            events=self.events,
            two_tier=two_tier,
            audiences=self.audiences,
            access=access,
            nearby=settings.importance_forget_nearby,
            nearby_similarity=settings.importance_forget_similarity,
        )

    async def _storage(self) -> VectorStorage:
        return await self.vectors.storage(self.session)

    # --- add -------------------------------------------------------------------------------

    async def add_many(
        self,
        robot_name: str,
        bodies: list[MemoryCreate],
        *,
        place: bool = True,
        batch: bool = True,
    ) -> list[MemoryAdded]:
        """All or nothing: every memory is stored (or, as a duplicate, reinforces the memory
        it duplicates), or none is. An error names a field of `memories[i]`, or of the body
        itself for one memory added alone (`batch` false: `add`). The steps are
        app/memories/adding.py's."""
        prepared = await self._preparation().prepare(bodies, batch=batch)
        registration = await self._register(robot_name)
        try:
            drafts = prepared.drafts(await self.audiences.for_adds(registration.robot, bodies))
            supersedes, proposals = await supersessions(
                bodies,
                drafts,
                self._detector(),
                self.settings.supersede,
                author=registration.robot.name,
                statements=self.settings.supersede_statements,
            )
            written = await self._write(prepared, drafts, supersedes, registration)
        except Exception:
            await self._discard(registration)
            raise
        added = await self.writes.acknowledge(registration.robot, written, place)
        return proposing(added, proposals)

    def _preparation(self) -> AddPreparation:
        return AddPreparation(
            session=self.session,
            namespace_id=self.caller.namespace_id,
            settings=self.settings,
            clock=self.clock,
            vectors=self.vectors,
            embedder=self.embedder,
            tokenizer=self.tokenizer,
        )

    def _detector(self) -> Detector:
        """The supersede detector, for this request's instant."""
        ns, caches = self.caller.namespace_id, self.search_caches
        return Detector.of(self.session, ns, self.settings, caches=caches, llm=self.llm)(
            self.clock()
        )

    async def _write(
        self,
        prepared: Prepared,
        drafts: list[MemoryDraft],
        supersedes: list[list[str]],
        registration: Registration,
    ) -> Committed:
        """The write, by the strategy of the batch's transaction shape; once more if the
        robot, read from the cache, was removed meanwhile (its foreign key found nothing):
        registered again, in its place."""
        strategy = await self._strategy(prepared, drafts, supersedes)
        try:
            return await strategy.write(registration.robot, drafts)
        except RemovedMeanwhile:
            await self.session.rollback()
            self.robots.forget(registration.robot.name)
            registration.renew(await self._register(registration.robot.name))
            return await strategy.write(registration.robot, drafts)

    async def _strategy(
        self, prepared: Prepared, drafts: list[MemoryDraft], supersedes: list[list[str]]
    ) -> AddStrategy:
        """Superseding (the add's dedupe rule does not apply), deduplicated when a draft may
        duplicate, else plain (group commit)."""
        ns = self.caller.namespace_id
        if any(supersedes):
            asked = frozenset(k for b in prepared.bodies for k in b.supersedes)
            return SupersedingAdds(
                ns, self.writes, self.two_tier, self.audiences, supersedes, asked
            )
        conversation = [s.conversation for s in prepared.searched]
        rules = rules_for_adds(prepared.bodies, drafts, conversation, self.settings)
        finder = DuplicateRepository(self.session)
        if await may_duplicate(prepared.bodies, drafts, rules, finder=finder, namespace_id=ns):
            search = Search(self.session, self.settings.hnsw_ef_search, self.search_caches)
            nearest = nearest_of_type(search, ns, self.clock)
            return DuplicateAdds(
                self.session, ns, self.writes, self.two_tier, self.clock, nearest, rules
            )
        return PlainAdds(self.session, self.writes, self.adds)

    async def _register(self, robot_name: str) -> Registration:
        """The robot, registered on first use in a transaction of its own, committed before
        the write it is for (RobotService.register_first)."""
        return Registration(*await self.robots.register_first(robot_name))

    async def _discard(self, registration: Registration) -> None:
        """A write refused after the robot's registration committed: the robot is
        discarded again if nothing else uses it (RobotService.discard never waits)."""
        if registration.version is None:
            return
        with contextlib.suppress(Exception):  # the write's own error is the answer
            await self.session.rollback()
            await self.robots.discard(registration.robot, registration.version)

    async def add(self, robot_name: str, body: MemoryCreate) -> MemoryAdded:
        return (await self.add_many(robot_name, [body], batch=False))[0]

    # --- upsert ----------------------------------------------------------------------------

    async def upsert(
        self, robot_name: str, key: str, body: MemoryFields, *, create: bool = True
    ) -> MemoryAdded:
        """Idempotent PUT: create the key (201), or replace its fields (200), reviving a soft
        delete. Concurrent PUTs of one key all succeed; the last to commit wins everywhere.
        With `create` false, a key that does not exist is a 404 instead."""
        put = await self._prepare_put(robot_name, key, body)
        registration = await self._register(robot_name)
        try:
            for _ in range(UPSERT_ATTEMPTS):
                added = await self._put(registration, key, put, create)
                if added is not None:
                    return added
            raise Conflict(
                f"memory {key!r} kept being created and deleted concurrently; retry", keys=[key]
            )
        except Exception:
            await self._discard(registration)
            raise

    async def _prepare_put(self, robot_name: str, key: str, body: MemoryFields) -> _Put:
        """A PUT's checks, search text, vector (embedded before any lock is taken, and only
        when the stored one cannot be kept) and tokens: nothing written."""
        check_fields(self.settings, body)
        if body.embedding is not None:
            check_storable([body.embedding], await self._storage())
        namespace_id = self.caller.namespace_id
        current = await self.repo.get(namespace_id, key, reader=self._reader(robot_name))
        check_validity(body, current.created_at if current is not None else self.clock())
        at = body.created_at or getattr(current, "created_at", None)
        [said] = await search_texts(
            self.turns,
            self.settings.search_text,
            namespace_id,
            now=self.clock(),
            items=[Written(body.content, at, body.metadata, body.tags)],
            skip=[current.id] if current is not None else None,
        )
        text, body = said.text, body.model_copy(update={"tags": said.tags})
        vector: list[float] | None = body.embedding
        model = "client" if vector is not None else None
        wanted = vector_input(body.content, body.metadata, text, self.settings.embed_text)
        if vector is None and (
            current is None
            or not same_vector_input(
                (current.content, current.metadata, current.search_text),
                (body.content, body.metadata, text),
            )
        ):
            if self.embedder.available:
                await self.session.rollback()  # no transaction open across the provider call
            [vector], model = await self.embedder.embed_or_defer([wanted])
        tokens = await self.tokenizer.count_async(body.content)
        return _Put(body, text, vector, model, tokens)

    async def _put(
        self, registration: Registration, key: str, put: _Put, create: bool
    ) -> MemoryAdded | None:
        """One turn of a PUT: lock the row and replace it, or create it; None when the key
        was created or its robot removed concurrently (the next turn sees that commit)."""
        robot, body, name = registration.robot, put.body, registration.robot.name
        ns = self.caller.namespace_id
        row = await self.repo.get(ns, key, for_update=True, viewer=self._reader(name))
        if row is not None and not await self._readable(name, row):
            # Keys are namespace-wide: one the robot may not read is taken, not shown.
            raise NotFound(f"memory {key!r} does not exist") if not create else key_taken([key])
        if row is None and not create:
            raise NotFound(f"memory {key!r} does not exist")
        if row is not None:
            return await self._replace(
                robot,
                row,
                body,
                tokens=put.tokens,
                vector=put.vector,
                model=put.model,
                search_text=put.text,
            )
        draft = MemoryDraft(
            key=key,
            created_at=body.created_at,
            content=body.content,
            type=body.type,
            importance=body.importance,
            tags=body.tags,
            metadata=body.metadata,
            token_count=put.tokens,
            embedding=put.vector,
            embedding_model=put.model if put.vector is not None else None,
            search_text=put.text,
            valid_from=body.valid_from,
            valid_to=body.valid_to,
            audience=await self.audiences.asked(robot, body),
        )
        try:
            new, taken = await self.writes.store(robot, [draft])
        except RemovedMeanwhile:  # the robot, read from the cache, was removed
            await self.session.rollback()
            self.robots.forget(name)
            registration.renew(await self._register(name))
            return None
        if taken:
            return None  # created concurrently (that commit is visible now): replace it
        await self.two_tier.commit_durable()
        [added] = await self.writes.acknowledge(robot, self.writes.written(robot, new))
        return added

    async def _replace(
        self,
        robot: Robot,
        row: Any,
        body: MemoryFields,
        *,
        tokens: int,
        vector: list[float] | None,
        model: str | None,
        search_text: str | EllipsisType | None = ...,
    ) -> MemoryAdded:
        """The locked row gets the body's fields (and `search_text`; `...`: it keeps its
        own). Holders of its old content are marked in the same transaction and withdrawn after
        the commit; the writer gets the new one."""
        audience = await self.audiences.for_change(robot, row, body)
        if audience != Audience.of(row):
            await self._still_covers(row, audience, keeps_successor=body.valid_to is not None)
        rewrite = await self.writes.rewrite(
            robot,
            row,
            body,
            tokens=tokens,
            vector=vector,
            model=model,
            search_text=search_text,
            audience=audience,
        )
        await self.two_tier.commit_durable()
        outcomes = await self.writes.place(robot, [rewrite.placement], rewrites=[rewrite])
        return self.writes.rewritten(rewrite, outcomes[row.key])

    async def _still_covers(self, row: Any, audience: Audience, *, keeps_successor: bool) -> None:
        """A change of the locked memory's audience keeps the supersede rule: it is still
        read by everyone who reads what it superseded and, while it stays superseded (a PUT
        with `valid_to` keeps `superseded_by`), its successor by everyone who reads it
        (app/visibility.covers); else 409, nothing written."""
        chain = await SupersedeRepository(self.session).neighbours(self.caller.namespace_id, row)
        old = [(m.key, Audience.of(m), m.author) for m in chain if not m.successor]
        check_covers(row.key, audience, row.author, old)
        for new in (m for m in chain if m.successor and keeps_successor):
            check_covers(new.key, Audience.of(new), new.author, [(row.key, audience, row.author)])

    async def adjust_importance(
        self, robot_name: str, key: str, change: ImportanceChange
    ) -> MemoryAdded:
        """A new importance, or the current one moved by `boost` (kept within 0-10), and a
        new `confidence` or `source` when given (the others kept): a replace of the locked
        row like a PUT of its other fields, so holders re-place it."""
        robot = await self.robots.ensure(robot_name)
        row = await self._get(key, lock=True, reader=robot_name)
        importance = change.importance
        if importance is None:
            importance = min(10.0, max(0.0, row.importance + (change.boost or 0.0)))
        fields = fields_of(row, importance=importance, tags=list(row.tags))
        given = change.model_fields_set
        fields.confidence = change.confidence if "confidence" in given else row.confidence
        fields.source = change.source if "source" in given else row.source
        return await self._replace(
            robot, row, fields, tokens=row.token_count, vector=None, model=None
        )

    # --- forget, archive, restore: forgetting.py -------------------------------------------

    async def forget(
        self, robot_name: str, key: str, hard: bool, confirm: str | None, *, nearby: bool = True
    ) -> MemoryRead:
        """Soft delete by default (restorable); hard delete only when `confirm` repeats the key.
        Every robot holding it lets it go, after the durable commit. `nearby`: its nearest
        memories lose a little learned importance (not when an import replays a forget whose
        steps its file carries)."""
        return await self.forgetting.forget(robot_name, key, hard, confirm, nearby=nearby)

    async def archive(self, key: str, version: int, rule: str) -> bool:
        """A retention policy's forget (app/retention), of the memory as the policy judged it
        (`version`). Whether it was archived."""
        return await self.forgetting.archive(key, version, rule)

    async def restore(self, robot_name: str, key: str) -> MemoryRead:
        return await self.forgetting.restore(robot_name, key)

    # --- read ------------------------------------------------------------------------------

    def _reader(self, robot_name: str) -> Reader:
        return Reader(self.caller.namespace_id, robot_name)

    async def _readable(self, robot_name: str, row: Any) -> bool:
        """Whether the robot may read this locked row (a namespace-wide one without asking)."""
        if row.visibility == "namespace":
            return True
        ns = self.caller.namespace_id
        return await self.repo.get(ns, row.key, reader=self._reader(robot_name)) is not None

    async def _get(
        self, key: str, include_deleted: bool = False, *, lock: bool = False, reader: str
    ) -> Any:
        """The memory as `reader` may see it (404 otherwise)."""
        row = await self.repo.get(
            self.caller.namespace_id, key, for_update=lock, reader=self._reader(reader)
        )
        if row is None or (row.deleted_at is not None and not include_deleted):
            raise NotFound(f"memory {key!r} does not exist")
        return row
