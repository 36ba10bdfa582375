"""The rules of the long-term tier: durable first, then working memory."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any, NamedTuple

from app.auth.caller import Caller
from app.clock import Clock
from app.config import Settings, VectorStorage
from app.db.session import DbSession
from app.db.vectors import StoredVectors, check_storable
from app.embeddings.timed import TimedEmbedder
from app.errors import BadRequest, Conflict, NotFound
from app.events.repository import EventRepository
from app.memories.adds import GroupCommit
from app.memories.limits import check_batch_size, check_fields
from app.memories.model import AddGroup, MemoryDraft, NewMemory, VectorChange
from app.memories.repository import MemoryRepository
from app.memories.schemas import (
    ImportanceChange,
    MemoryAdded,
    MemoryCreate,
    MemoryFields,
    MemoryRead,
    to_read,
)
from app.memories.version_repository import VersionRepository
from app.robots.service import Robot, RobotService
from app.tokens import Tokenizer
from app.working_memory.model import Placement
from app.working_memory.protocol import WriteProtocol
from app.working_memory.schemas import WorkingMemoryOutcome

log = logging.getLogger(__name__)

# A PUT retries its lock-or-create step this often when the key keeps appearing and
# disappearing under it (concurrent creates and hard deletes of the same key).
UPSERT_ATTEMPTS = 5


class MemoryService:
    def __init__(
        self,
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
    ) -> None:
        self.adds = adds
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
        self.history = VersionRepository(session)
        self.events = EventRepository(session, clock)

    async def _storage(self) -> VectorStorage:
        return await self.vectors.storage(self.session)

    # --- add -------------------------------------------------------------------------------

    async def add_many(
        self, robot_name: str, bodies: list[MemoryCreate], *, place: bool = True
    ) -> list[MemoryAdded]:
        """All or nothing: every memory is stored, or none is."""
        check_batch_size(self.settings, len(bodies))
        for i, body in enumerate(bodies):
            check_fields(self.settings, body, i if len(bodies) > 1 else None)
        if any(b.embedding is not None for b in bodies):  # no connection otherwise
            check_storable([b.embedding for b in bodies], await self._storage())
        keys = [b.key for b in bodies if b.key]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)

        todo = [i for i, b in enumerate(bodies) if b.embedding is None]
        vectors, model = await self.embedder.embed_or_defer([bodies[i].content for i in todo])
        embeddings: list[list[float] | None] = [b.embedding for b in bodies]
        models: list[str | None] = ["client" if b.embedding else None for b in bodies]
        for i, v in zip(todo, vectors, strict=True):
            embeddings[i], models[i] = v, model if v is not None else None
        tokens = await self.tokenizer.count_many_async([b.content for b in bodies])
        robot = await self.robots.ensure(robot_name)
        drafts = [
            MemoryDraft(
                key=b.key or f"m-{uuid.uuid4().hex}",
                created_at=b.created_at,
                content=b.content,
                type=b.type,
                importance=b.importance,
                tags=b.tags,
                metadata=b.metadata,
                token_count=tokens[i],
                embedding=embeddings[i],
                embedding_model=models[i],
            )
            for i, b in enumerate(bodies)
        ]
        new, taken = await self._store(robot, drafts, group_commit=True)
        if taken:
            raise Conflict(
                f"key already exists in this namespace: {', '.join(taken)}; "
                "use PUT /v1/robots/{robot}/memories/{key} to update",
                keys=taken,
            )
        return await self._acknowledge_new(robot, new, place)

    async def _store(
        self, robot: Robot, drafts: list[MemoryDraft], *, group_commit: bool = False
    ) -> tuple[list[_Stored], list[str]]:
        """Claim the drafts' keys and store them: with `group_commit`, committed together
        with concurrent adds (app/memories/adds.py); otherwise in the open transaction.
        Returns what was stored, or (when any key is taken) nothing and the taken keys."""
        group = AddGroup(self.caller.namespace_id, robot.id, drafts, self.clock())
        if group_commit:
            # The group commits in its own transaction: a robot this request registered
            # must be visible there, and no connection is held while waiting for it (the
            # group's transaction needs one from the same pool).
            await self.session.commit()
            await self.session.release()
            result = await self.adds.store(group)
        else:
            [result] = await self.repo.add([group], await self._storage())
        claimed, now = result.claimed, result.now
        if result.taken or now is None:
            return [], sorted(result.taken)
        stored = [
            _Stored(NewMemory.from_draft(d, *claimed[d.key], author_robot_id=robot.id), now)
            for d in drafts
        ]
        return stored, []

    async def _acknowledge_new(
        self, robot: Robot, new: list[_Stored], place: bool = True
    ) -> list[MemoryAdded]:
        """Durable first (invariant 1), then working memory (unless `place` is off); the
        response shows what was just written, so nothing is read back (and nothing can fail
        after the commit)."""
        await self.two_tier.commit_durable()
        placements = [
            Placement(m.id, m.created_at, 1, m.key, m.content, m.token_count, m.importance)
            for m, _ in new
        ]
        if place:
            outcomes = await self.two_tier.place(robot, placements)
        else:
            unplaced = WorkingMemoryOutcome(admitted=False, reason="not_placed")
            outcomes = {p.key: unplaced for p in placements}
        return [
            MemoryAdded(
                **_shown(m),
                id=m.id,
                author=robot.name,
                embedding_status="ready" if m.embedding is not None else "pending",
                embedding_model=m.embedding_model,
                created_at=m.created_at,
                updated_at=now,  # the insert's now(): same transaction as the claim
                deleted_at=None,
                version=1,
                created=True,
                working_memory=outcomes[m.key],
            )
            for m, now in new
        ]

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
                new, taken = await self._store(robot, [draft])
                if not taken:
                    return (await self._acknowledge_new(robot, new))[0]
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
        same_content = row.content == body.content
        if body.embedding is not None:
            change = VectorChange(keep=False, embedding=body.embedding, model="client")
        elif same_content:
            change = VectorChange(keep=True)
        else:  # vector was embedded for body.content (or is None: pending for the worker)
            change = VectorChange(keep=False, embedding=vector, model=model)
        m = NewMemory(
            id=row.id,
            created_at=body.created_at or row.created_at,
            key=row.key,
            content=body.content,
            type=body.type,
            importance=body.importance,
            tags=body.tags,
            metadata=body.metadata,
            author_robot_id=row.author_robot_id,
            token_count=tokens,
            embedding=None,
            embedding_model=None,
        )
        unchanged = (
            row.deleted_at is None
            and same_content
            and change.keep
            and (m.created_at, m.type, m.importance, m.tags, m.metadata)
            == (row.created_at, row.type, row.importance, list(row.tags), row.metadata)
        )
        holders = []
        if unchanged:  # a repeated PUT: nothing to write
            version, written = row.version, row
        else:
            version = row.version + 1
            await self.history.keep(row.id, row.created_at)  # the version being replaced
            written = await self.repo.replace(
                row, m, version, change, await self._storage(), robot.id
            )
            if m.created_at != row.created_at:
                await self.two_tier.moved(row.id, m.created_at)
            if not same_content or m.importance != row.importance:
                holders = await self.two_tier.mark_holders(row.id)
            await self.events.record(
                self.caller.namespace_id, "add", robot.id, [row.id], {"upsert": True}
            )
        await self.two_tier.commit_durable()

        # The writer's own copy is replaced by its placement below, not withdrawn.
        await self.two_tier.withdraw(
            [h for h in holders if h.robot_id != robot.id], row.id, row.key
        )
        outcomes = await self.two_tier.place(
            robot,
            [Placement(row.id, m.created_at, version, row.key, m.content, tokens, m.importance)],
        )
        return MemoryAdded(
            **_shown(m),
            id=row.id,
            author=row.author,
            embedding_status=written.embedding_status,
            embedding_model=written.embedding_model,
            created_at=m.created_at,
            updated_at=written.updated_at,
            deleted_at=None,
            version=version,
            created=False,
            working_memory=outcomes[row.key],
        )

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
        fields = MemoryFields.model_construct(
            content=row.content,
            type=row.type,
            importance=importance,
            tags=list(row.tags),
            metadata=row.metadata,
            created_at=None,
            embedding=None,
        )
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


_SHOWN = ("key", "content", "type", "importance", "tags", "metadata", "token_count")


def _shown(m: NewMemory) -> dict[str, Any]:
    """The fields a response repeats as they were written."""
    return {f: getattr(m, f) for f in _SHOWN}


class _Stored(NamedTuple):
    """A memory stored in the open transaction, and that transaction's now()."""

    memory: NewMemory
    now: datetime
