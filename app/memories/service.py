"""The rules of the long-term tier: durable first, then working memory."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from types import EllipsisType
from typing import Any, NamedTuple

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings, VectorStorage
from app.conversation import is_conversation
from app.db.session import DbSession
from app.db.vectors import StoredVectors, check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import Conflict, NotFound, RemovedMeanwhile
from app.events.repository import EventRepository
from app.llm.base import ChatModel
from app.memories import importance as importance_scorer
from app.memories.adds import GroupCommit
from app.memories.audiences import Audiences
from app.memories.contexts import Written, search_texts
from app.memories.dedupe import rule_for
from app.memories.dedupe_adds import DuplicateAdds, may_duplicate
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.forgetting import Forgetting
from app.memories.limits import check_batch_size, check_fields, check_validity
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import (
    ImportanceChange,
    MemoryAdded,
    MemoryCreate,
    MemoryFields,
    MemoryRead,
)
from app.memories.search_text import searched, with_speaker_tag
from app.memories.supersede import (
    Detector,
    SupersedingAdds,
    check_covers,
    proposing,
    supersessions,
)
from app.memories.supersede_repository import SupersedeRepository
from app.memories.turn_repository import TurnRepository
from app.memories.writes import MemoryWrites, fields_of, key_taken
from app.pools.service import PoolService
from app.recall.caches import SearchCaches
from app.recall.search import Search
from app.robots.service import Robot, RobotService
from app.tokens import Tokenizer
from app.visibility import NAMESPACE, Audience, Reader
from app.working_memory.protocol import WriteProtocol

log = logging.getLogger(__name__)

# A PUT retries its lock-or-create step this often when the key keeps appearing and
# disappearing under it (concurrent creates and hard deletes of the same key).
UPSERT_ATTEMPTS = 5


class Derived(NamedTuple):
    """What a PUT stores beside its fields, worked out before any lock is taken."""

    tokens: int
    vector: list[float] | None
    model: str | None  # the vector's
    search_text: str | EllipsisType | None = ...  # `...`: the row keeps its own


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
        itself for one memory added alone (`batch` false: `add`)."""
        check_batch_size(self.settings, len(bodies))
        for i, body in enumerate(bodies):
            check_fields(self.settings, body, i if batch else None)
            check_validity(body, self.clock(), i if batch else None)
        if any(b.embedding is not None for b in bodies):  # no connection otherwise
            check_storable([b.embedding for b in bodies], await self._storage())
        keys = Counter(b.key for b in bodies if b.key)
        dupes = sorted(k for k, n in keys.items() if n > 1)
        if dupes:
            raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)
        # A conversation's turns are events: the same words said twice are two turns, so the
        # deployment's default rule leaves them alone (an add's own `dedupe` still applies).
        rules = [
            rule_for(
                "off" if b.dedupe is None and is_conversation(b.metadata) else b.dedupe,
                b.dedupe_threshold,
                self.settings,
            )
            for b in bodies
        ]
        template = self.settings.search_text
        texts = await search_texts(
            self.turns,
            template,
            self.caller.namespace_id,
            self.clock(),
            [Written(b.content, b.created_at, b.metadata) for b in bodies],
        )
        if self.embedder.available and any(is_conversation(b.metadata) for b in bodies):
            await self.session.rollback()  # the turns read: no transaction across the provider
        todo = [i for i, b in enumerate(bodies) if b.embedding is None]
        vectors, model = await self.embedder.embed_or_defer(
            [searched(bodies[i].content, texts[i]) for i in todo]
        )
        embeddings: list[list[float] | None] = [b.embedding for b in bodies]
        models: list[str | None] = ["client" if b.embedding else None for b in bodies]
        for i, v in zip(todo, vectors, strict=True):
            embeddings[i], models[i] = v, model if v is not None else None
        tokens = await self.tokenizer.count_many_async([b.content for b in bodies])
        robot, registered = await self.robots.register(robot_name)
        try:
            audiences = await self.audiences.for_adds(robot, bodies)
        except Exception:  # nothing is written: nor is the robot
            if registered is not None:
                await self.robots.discard(robot, registered)
            raise
        drafts = [
            MemoryDraft(
                key=b.key or f"m-{uuid.uuid4().hex}",
                created_at=b.created_at,
                content=b.content,
                type=b.type,
                importance=self._importance(b),
                tags=with_speaker_tag(b.tags, b.metadata, template),
                metadata=b.metadata,
                token_count=tokens[i],
                embedding=embeddings[i],
                embedding_model=models[i],
                search_text=texts[i],
                valid_from=b.valid_from,
                valid_to=b.valid_to,
                audience=audiences[i],
            )
            for i, b in enumerate(bodies)
        ]
        detector = Detector.of(
            self.session, self.caller.namespace_id, self.settings, self.search_caches, self.llm
        )
        supersedes, proposals = await supersessions(
            bodies, drafts, detector(self.clock()), self.settings.supersede
        )
        if any(supersedes):
            # One transaction under the superseded rows' locks (a 409 registers nothing);
            # the add's dedupe rule does not apply.
            added = await SupersedingAdds(
                namespace_id=self.caller.namespace_id,
                writes=self.writes,
                two_tier=self.two_tier,
                audiences=self.audiences,
            ).add(robot, drafts, supersedes, place)
            return proposing(added, proposals)
        # A private, group or pool memory is nobody's duplicate: it is stored as asked.
        rules = [r if d.audience == NAMESPACE else rule_for("off", None, self.settings)
                 for r, d in zip(rules, drafts, strict=True)]  # fmt: skip
        finder = DuplicateRepository(self.session)
        if await may_duplicate(bodies, drafts, rules, finder, self.caller.namespace_id):
            # One transaction under the rules' locks: a 409 registers nothing.
            added = await DuplicateAdds(
                session=self.session,
                namespace_id=self.caller.namespace_id,
                writes=self.writes,
                two_tier=self.two_tier,
                clock=self.clock,
                search=Search(self.session, self.settings.hnsw_ef_search, self.search_caches),
            ).add(robot, drafts, rules, place)
            return proposing(added, proposals)
        try:
            try:
                new, taken = await self.writes.store(robot, drafts, group_commit=True)
            except RemovedMeanwhile:  # the robot, read from the cache, was removed: again
                self.robots.forget(robot_name)
                robot, registered = await self.robots.register(robot_name)
                new, taken = await self.writes.store(robot, drafts, group_commit=True)
            if taken:
                raise key_taken(taken)
        except Exception:
            # The group commits in its own transaction, so the robot's registration was
            # committed before it: a rejected add must not leave a robot behind.
            if registered is not None:
                with contextlib.suppress(Exception):  # the add's own error is the answer
                    await self.robots.discard(robot, registered)
            raise
        return proposing(await self.writes.acknowledge_new(robot, new, place), proposals)

    def _importance(self, body: MemoryCreate) -> float:
        """The body's importance; when it has none and the deployment scores adds, the
        heuristic scorer's (app/memories/importance.py)."""
        if "importance" in body.model_fields_set or self.settings.importance_scorer == "off":
            return body.importance
        return importance_scorer.score(body.content, body.type, body.metadata)

    async def add(self, robot_name: str, body: MemoryCreate) -> MemoryAdded:
        return (await self.add_many(robot_name, [body], batch=False))[0]

    # --- upsert ----------------------------------------------------------------------------

    async def upsert(
        self, robot_name: str, key: str, body: MemoryFields, *, create: bool = True
    ) -> MemoryAdded:
        """Idempotent PUT: create the key (201), or replace its fields (200), reviving a soft
        delete. Concurrent PUTs of one key all succeed; the last to commit wins everywhere.
        With `create` false, a key that does not exist is a 404 instead."""
        check_fields(self.settings, body)
        if body.embedding is not None:
            check_storable([body.embedding], await self._storage())
        # Embed before taking any lock, and only when the stored vector cannot be kept.
        current = await self.repo.get(
            self.caller.namespace_id, key, reader=self._reader(robot_name)
        )
        check_validity(body, current.created_at if current is not None else self.clock())
        body, derived = await self._derive(body, current)
        robot = await self.robots.ensure(robot_name)
        for _ in range(UPSERT_ATTEMPTS):
            row = await self.repo.get(
                self.caller.namespace_id, key, for_update=True, viewer=self._reader(robot_name)
            )
            if row is not None and not await self._readable(robot_name, row):
                # Keys are namespace-wide: one the robot may not read is taken, not shown.
                raise NotFound(f"memory {key!r} does not exist") if not create else key_taken([key])
            if row is None and not create:
                raise NotFound(f"memory {key!r} does not exist")
            if row is not None:
                return await self._replace(robot, row, body, derived)
            draft = await self._draft(robot, key, body, derived)
            try:
                new, taken = await self.writes.store(robot, [draft])
            except RemovedMeanwhile:  # the robot, read from the cache, was removed
                await self.session.rollback()
                self.robots.forget(robot_name)
                robot = await self.robots.ensure(robot_name)
                continue
            if not taken:
                return (await self.writes.acknowledge_new(robot, new))[0]
            # Created concurrently (that commit is visible now): the next turn replaces it.
        raise Conflict(
            f"memory {key!r} kept being created and deleted concurrently; retry", keys=[key]
        )

    async def _derive(self, body: MemoryFields, current: Any) -> tuple[MemoryFields, Derived]:
        """A PUT's body with the speaker's tag, and what it stores beside its fields: the
        search text, the vector (embedded only when the stored one cannot be kept, with no
        transaction open across the provider's call), the token count."""
        template = self.settings.search_text
        written = Written(
            body.content, body.created_at or getattr(current, "created_at", None), body.metadata
        )
        [text] = await search_texts(
            self.turns,
            template,
            self.caller.namespace_id,
            self.clock(),
            [written],
            skip=[current.id] if current is not None else None,
        )
        body = body.model_copy(
            update={"tags": with_speaker_tag(body.tags, body.metadata, template)}
        )
        vector: list[float] | None = body.embedding
        model = "client" if vector is not None else None
        wanted = searched(body.content, text)
        if vector is None and (
            current is None or searched(current.content, current.search_text) != wanted
        ):
            if self.embedder.available:
                await self.session.rollback()  # no transaction open across the provider call
            [vector], model = await self.embedder.embed_or_defer([wanted])
        tokens = await self.tokenizer.count_async(body.content)
        return body, Derived(tokens, vector, model, text)

    async def _draft(
        self, robot: Robot, key: str, body: MemoryFields, derived: Derived
    ) -> MemoryDraft:
        assert derived.search_text is not ..., "a new memory's search text is derived"
        return MemoryDraft(
            key=key,
            created_at=body.created_at,
            content=body.content,
            type=body.type,
            importance=body.importance,
            tags=body.tags,
            metadata=body.metadata,
            token_count=derived.tokens,
            embedding=derived.vector,
            embedding_model=derived.model if derived.vector is not None else None,
            search_text=derived.search_text,
            valid_from=body.valid_from,
            valid_to=body.valid_to,
            audience=await self.audiences.asked(robot, body),
        )

    async def _replace(
        self, robot: Robot, row: Any, body: MemoryFields, derived: Derived
    ) -> MemoryAdded:
        """The locked row gets the body's fields (and the derived search text; `...`: it
        keeps its own). Holders of its old content are marked in the same transaction and
        withdrawn after the commit; the writer gets the new one."""
        audience = await self.audiences.for_change(robot, row, body)
        if audience != Audience.of(row):
            await self._still_covers(row, audience, keeps_successor=body.valid_to is not None)
        rewrite = await self.writes.rewrite(
            robot,
            row,
            body,
            derived.tokens,
            derived.vector,
            derived.model,
            search_text=derived.search_text,
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
        """A new importance, or the current one moved by `boost` (kept within 0-10): a
        replace of the locked row like a PUT of its other fields, so holders re-place it."""
        robot = await self.robots.ensure(robot_name)
        row = await self._get(key, lock=True, reader=robot_name)
        importance = change.importance
        if importance is None:
            importance = min(10.0, max(0.0, row.importance + (change.boost or 0.0)))
        fields = fields_of(row, importance=importance, tags=list(row.tags))
        return await self._replace(robot, row, fields, Derived(row.token_count, None, None))

    # --- forget, archive, restore: forgetting.py -------------------------------------------

    async def forget(
        self, robot_name: str, key: str, hard: bool, confirm: str | None
    ) -> MemoryRead:
        """Soft delete by default (restorable); hard delete only when `confirm` repeats the key.
        Every robot holding it lets it go, after the durable commit."""
        return await self.forgetting.forget(robot_name, key, hard, confirm)

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
