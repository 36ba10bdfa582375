"""The rules of the long-term tier: durable first, then working memory."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import Counter
from typing import Any

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings, VectorStorage
from app.db.session import DbSession
from app.db.vectors import StoredVectors, check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import BadRequest, Conflict, NotFound, RemovedMeanwhile
from app.events.repository import EventRepository
from app.memories import importance as importance_scorer
from app.memories.adds import GroupCommit
from app.memories.dedupe import DedupeRule, lock_keys, rule_for, same, union
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.limits import check_batch_size, check_fields
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import (
    ImportanceChange,
    MemoryAdded,
    MemoryCreate,
    MemoryFields,
    MemoryRead,
    to_read,
)
from app.memories.writes import MemoryWrites, Rewrite, fields_of, key_taken, placement_of
from app.recall.caches import SearchCaches
from app.recall.query import SearchFilters, SearchQuery
from app.recall.repository import SearchRepository
from app.robots.service import Robot, RobotService
from app.tokens import Tokenizer
from app.working_memory.protocol import WriteProtocol

log = logging.getLogger(__name__)

# A PUT retries its lock-or-create step this often when the key keeps appearing and
# disappearing under it (concurrent creates and hard deletes of the same key).
UPSERT_ATTEMPTS = 5


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
    ) -> None:
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
        self.events = EventRepository(session, clock)
        self.writes = MemoryWrites(session, caller, two_tier, clock, adds, vectors)

    async def _storage(self) -> VectorStorage:
        return await self.vectors.storage(self.session)

    # --- add -------------------------------------------------------------------------------

    async def add_many(
        self, robot_name: str, bodies: list[MemoryCreate], *, place: bool = True
    ) -> list[MemoryAdded]:
        """All or nothing: every memory is stored (or, as a duplicate, reinforces the memory
        it duplicates), or none is."""
        check_batch_size(self.settings, len(bodies))
        for i, body in enumerate(bodies):
            check_fields(self.settings, body, i if len(bodies) > 1 else None)
        if any(b.embedding is not None for b in bodies):  # no connection otherwise
            check_storable([b.embedding for b in bodies], await self._storage())
        keys = Counter(b.key for b in bodies if b.key)
        dupes = sorted(k for k, n in keys.items() if n > 1)
        if dupes:
            raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)
        rules = [rule_for(b.dedupe, b.dedupe_threshold, self.settings) for b in bodies]

        todo = [i for i, b in enumerate(bodies) if b.embedding is None]
        vectors, model = await self.embedder.embed_or_defer([bodies[i].content for i in todo])
        embeddings: list[list[float] | None] = [b.embedding for b in bodies]
        models: list[str | None] = ["client" if b.embedding else None for b in bodies]
        for i, v in zip(todo, vectors, strict=True):
            embeddings[i], models[i] = v, model if v is not None else None
        tokens = await self.tokenizer.count_many_async([b.content for b in bodies])
        robot, registered = await self.robots.register(robot_name)
        drafts = [
            MemoryDraft(
                key=b.key or f"m-{uuid.uuid4().hex}",
                created_at=b.created_at,
                content=b.content,
                type=b.type,
                importance=self._importance(b),
                tags=b.tags,
                metadata=b.metadata,
                token_count=tokens[i],
                embedding=embeddings[i],
                embedding_model=models[i],
            )
            for i, b in enumerate(bodies)
        ]
        if any(r.mode != "off" for r in rules):  # one transaction: a 409 registers nothing
            return await self._add_deduplicated(robot, drafts, rules, place)
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
        return await self.writes.acknowledge_new(robot, new, place)

    def _importance(self, body: MemoryCreate) -> float:
        """The body's importance; when it has none and the deployment scores adds, the
        heuristic scorer's (app/memories/importance.py)."""
        if "importance" in body.model_fields_set or self.settings.importance_scorer == "off":
            return body.importance
        return importance_scorer.score(body.content, body.type, body.metadata)

    async def _add_deduplicated(
        self, robot: Robot, drafts: list[MemoryDraft], rules: list[DedupeRule], place: bool
    ) -> list[MemoryAdded]:
        """An add with a dedupe rule (app/memories/dedupe.py), in the request's transaction
        under the rule's advisory locks: each draft duplicating a stored memory reinforces
        it, each duplicating an earlier draft of the batch joins that draft, the rest are
        stored; one durable commit, then working memory."""
        ns = self.caller.namespace_id
        finder = DuplicateRepository(self.session)
        locks = [lock_keys(ns, d.type, d.content, r) for d, r in zip(drafts, rules, strict=True)]
        await finder.lock(set().union(*locks))
        of_stored: dict[str, list[int]] = {}  # a stored memory's key: the drafts duplicating it
        of_draft: dict[int, int] = {}  # a draft: the earlier draft of the batch it duplicates
        fresh: list[int] = []
        for i, (d, rule) in enumerate(zip(drafts, rules, strict=True)):
            found = await self._stored_duplicate(finder, d, rule)
            if found is not None:
                of_stored.setdefault(found, []).append(i)
                continue
            j = next(
                (
                    j
                    for j in fresh
                    if drafts[j].type == d.type
                    and same(rule, d.content, d.embedding, drafts[j].content, drafts[j].embedding)
                ),
                None,
            )
            if j is None:
                fresh.append(i)
                continue
            of_draft[i] = j
            drafts[j].importance = max(drafts[j].importance, d.importance)
            drafts[j].tags = union(drafts[j].tags, d.tags)

        new, taken = await self.writes.store(robot, [drafts[i] for i in fresh])
        if taken:
            raise key_taken(taken)
        rewrites: list[tuple[Rewrite, Any]] = []
        for key, sources in of_stored.items():
            row = await self.repo.get(ns, key, for_update=True)
            if row is None or row.deleted_at is not None:
                raise Conflict(
                    f"memory {key!r}, which this add duplicates, was deleted meanwhile; retry",
                    keys=[key],
                )
            fields = fields_of(
                row,
                importance=max([row.importance] + [drafts[i].importance for i in sources]),
                tags=union(list(row.tags), [t for i in sources for t in drafts[i].tags]),
            )
            rewrite = await self.writes.rewrite(
                robot, row, fields, row.token_count, None, None, {"duplicate": True}
            )
            access = await finder.accessed(row.id, row.created_at, len(sources), self.clock())
            rewrites.append((rewrite, access))
        await self.two_tier.commit_durable()

        outcomes = await self.writes.place(
            robot,
            [placement_of(m) for m, _ in new] + [rw.placement for rw, _ in rewrites],
            place,
            [rw for rw, _ in rewrites],
        )
        added = {m.key: self.writes.added(robot, m, now, outcomes[m.key]) for m, now in new}
        for rw, access in rewrites:
            added[rw.row.key] = self.writes.rewritten(rw, outcomes[rw.row.key]).model_copy(
                update={
                    "access_count": access.access_count,
                    "last_accessed_at": access.last_accessed_at,
                }
            )
        by_draft = {i: key for key, sources in of_stored.items() for i in sources}
        answers: list[MemoryAdded] = []
        for i, d in enumerate(drafts):
            if i in by_draft:
                key = by_draft[i]
            elif i in of_draft:
                key = drafts[of_draft[i]].key
            else:
                answers.append(added[d.key])
                continue
            answers.append(added[key].model_copy(update={"created": False, "duplicate_of": key}))
        return answers

    async def _stored_duplicate(
        self, finder: DuplicateRepository, d: MemoryDraft, rule: DedupeRule
    ) -> str | None:
        """The key of the live memory `d` duplicates under `rule`, if any."""
        if rule.mode == "off":
            return None
        exact = await finder.exact(self.caller.namespace_id, d.type, d.content)
        if exact is not None:
            return str(exact.key)
        if rule.mode != "semantic" or d.embedding is None:
            return None
        search = SearchRepository(self.session, self.settings.hnsw_ef_search, self.search_caches)
        filters = SearchFilters(types=[d.type])
        nearest = await search.vector(
            SearchQuery(self.caller.namespace_id, 1, filters, vector=d.embedding)
        )
        if nearest and (nearest[0].vector_similarity or 0.0) >= rule.threshold:
            return nearest[0].key
        return None

    async def add(self, robot_name: str, body: MemoryCreate) -> MemoryAdded:
        return (await self.add_many(robot_name, [body]))[0]

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
        namespace_id = self.caller.namespace_id
        # Embed before taking any lock, and only when the stored vector cannot be kept.
        current = await self.repo.get(namespace_id, key)
        vector: list[float] | None = body.embedding
        model = "client" if vector is not None else None
        if vector is None and (current is None or current.content != body.content):
            if self.embedder.available:
                await self.session.rollback()  # no transaction open across the provider call
            [vector], model = await self.embedder.embed_or_defer([body.content])
        tokens = await self.tokenizer.count_async(body.content)
        robot = await self.robots.ensure(robot_name)
        for _ in range(UPSERT_ATTEMPTS):
            row = await self.repo.get(namespace_id, key, for_update=True)
            if row is None and not create:
                raise NotFound(f"memory {key!r} does not exist")
            if row is None:
                draft = MemoryDraft(
                    key=key,
                    created_at=body.created_at,
                    content=body.content,
                    type=body.type,
                    importance=body.importance,
                    tags=body.tags,
                    metadata=body.metadata,
                    token_count=tokens,
                    embedding=vector,
                    embedding_model=model if vector is not None else None,
                )
                try:
                    new, taken = await self.writes.store(robot, [draft])
                except RemovedMeanwhile:  # the robot, read from the cache, was removed
                    await self.session.rollback()
                    self.robots.forget(robot_name)
                    robot = await self.robots.ensure(robot_name)
                    continue
                if not taken:
                    return (await self.writes.acknowledge_new(robot, new))[0]
                continue  # created concurrently (that commit is visible now): replace it
            return await self._replace(robot, row, body, tokens, vector, model)
        raise Conflict(
            f"memory {key!r} kept being created and deleted concurrently; retry", keys=[key]
        )

    async def _replace(
        self,
        robot: Robot,
        row: Any,
        body: MemoryFields,
        tokens: int,
        vector: list[float] | None,
        model: str | None,
    ) -> MemoryAdded:
        """The locked row gets the body's fields. Holders of its old content are marked in
        the same transaction and withdrawn after the commit; the writer gets the new one."""
        rewrite = await self.writes.rewrite(robot, row, body, tokens, vector, model)
        await self.two_tier.commit_durable()
        outcomes = await self.writes.place(robot, [rewrite.placement], rewrites=[rewrite])
        return self.writes.rewritten(rewrite, outcomes[row.key])

    async def adjust_importance(
        self, robot_name: str, key: str, change: ImportanceChange
    ) -> MemoryAdded:
        """A new importance, or the current one moved by `boost` (kept within 0-10): a
        replace of the locked row like a PUT of its other fields, so holders re-place it."""
        robot = await self.robots.ensure(robot_name)
        row = await self._get(key, lock=True)
        importance = change.importance
        if importance is None:
            importance = min(10.0, max(0.0, row.importance + (change.boost or 0.0)))
        fields = fields_of(row, importance=importance, tags=list(row.tags))
        return await self._replace(robot, row, fields, row.token_count, None, None)

    # --- read ------------------------------------------------------------------------------

    async def _get(self, key: str, include_deleted: bool = False, *, lock: bool = False) -> Any:
        row = await self.repo.get(self.caller.namespace_id, key, for_update=lock)
        if row is None or (row.deleted_at is not None and not include_deleted):
            raise NotFound(f"memory {key!r} does not exist")
        return row

    # --- forget / restore ------------------------------------------------------------------

    async def forget(
        self, robot_name: str, key: str, hard: bool, confirm: str | None
    ) -> MemoryRead:
        """Soft delete by default (restorable); hard delete only when `confirm` repeats the key.
        Every robot holding it lets it go, after the durable commit."""
        robot = await self.robots.ensure(robot_name)
        row = await self._get(key, include_deleted=hard, lock=True)
        if hard and confirm != key:
            raise BadRequest(
                "a hard delete is permanent: repeat the memory's key in `confirm` to proceed",
                field="confirm",
            )
        holders = await self.two_tier.mark_holders(row.id)
        if hard:
            await self.repo.hard_delete(row.id, row.created_at)
            read = to_read(row)
        else:
            deleted = await self.repo.set_deleted(row.id, row.created_at, True)
            read = to_read(row).model_copy(
                update={"deleted_at": deleted.deleted_at, "updated_at": deleted.updated_at}
            )
        await self.events.record(
            self.caller.namespace_id, "forget", robot.id, [row.id], {"hard": hard, "key": key}
        )
        await self.two_tier.commit_durable()
        await self.two_tier.withdraw(holders, row.id, key)
        return read

    async def restore(self, robot_name: str, key: str) -> MemoryRead:
        robot = await self.robots.ensure(robot_name)
        row = await self._get(key, include_deleted=True, lock=True)
        if row.deleted_at is None:
            return to_read(row)
        restored = await self.repo.set_deleted(row.id, row.created_at, False)
        await self.events.record(self.caller.namespace_id, "restore", robot.id, [row.id])
        await self.two_tier.commit_durable()
        return to_read(row).model_copy(
            update={"deleted_at": None, "updated_at": restored.updated_at}
        )
