"""The rules of the long-term tier: durable first, then working memory."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import datetime
from typing import Any

from app.auth.caller import Caller
from app.config import Settings
from app.db.session import DbSession
from app.embeddings import EmbeddingError
from app.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, Unprocessable
from app.events.repository import EventRepository
from app.memories.repository import ListFilters, MemoryDraft, MemoryRepository, NewMemory
from app.memories.schemas import (
    MemoryAdded,
    MemoryCreate,
    MemoryFields,
    MemoryRead,
    WorkingMemoryOutcome,
)
from app.resources import Resources
from app.robots.service import Robot, RobotService
from app.working_memory.service import Placement, WorkingMemoryService

log = logging.getLogger(__name__)


def to_read(row: Any) -> MemoryRead:
    return MemoryRead(
        id=row.id,
        key=row.key,
        content=row.content,
        type=row.type,
        importance=row.importance,
        tags=list(row.tags),
        metadata=row.metadata,
        author=row.author,
        token_count=row.token_count,
        embedding_status=row.embedding_status,
        embedding_model=row.embedding_model,
        created_at=row.created_at,
        updated_at=row.updated_at,
        deleted_at=row.deleted_at,
    )


def _json_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_json_depth(v) for v in value), default=0)
    return 0


class MemoryService:
    def __init__(self, session: DbSession, caller: Caller, res: Resources) -> None:
        self.session = session
        self.caller = caller
        self.res = res
        self.settings: Settings = res.settings
        self.repo = MemoryRepository(session)
        self.events = EventRepository(session, res.clock)
        self.robots = RobotService(session, caller, res)
        self.working_memory = WorkingMemoryService(session, caller, res)

    # --- validation ------------------------------------------------------------------------

    def _check(self, body: MemoryFields, index: int | None = None) -> None:
        """Limits that depend on Settings (the schema checks shapes and ranges)."""
        where = "" if index is None else f"memories[{index}]."
        s = self.settings
        size = len(body.content.encode())
        if size > s.max_content_bytes:
            raise PayloadTooLarge(
                f"{where}content is {size} bytes; the limit is {s.max_content_bytes}",
                field=f"{where}content",
                limit=s.max_content_bytes,
            )
        errors: list[dict[str, str]] = []
        if len(body.tags) > s.max_tags:
            errors.append({"field": f"{where}tags", "message": f"at most {s.max_tags} tags"})
        if len(json.dumps(body.metadata)) > s.max_metadata_bytes:
            errors.append(
                {"field": f"{where}metadata", "message": f"over {s.max_metadata_bytes} bytes"}
            )
        if _json_depth(body.metadata) > s.max_metadata_depth:
            errors.append(
                {
                    "field": f"{where}metadata",
                    "message": f"nested deeper than {s.max_metadata_depth}",
                }
            )
        if body.embedding is not None and len(body.embedding) != s.embedding_dimension:
            errors.append(
                {
                    "field": f"{where}embedding",
                    "message": f"has {len(body.embedding)} dimensions; this deployment uses "
                    f"{s.embedding_dimension}",
                }
            )
        if errors:
            raise Unprocessable(
                "; ".join(f"{e['field']}: {e['message']}" for e in errors), errors=errors
            )

    # --- embeddings ------------------------------------------------------------------------

    async def _embed(self, texts: list[str]) -> tuple[list[list[float] | None], str | None]:
        """Embed now if the provider answers in time; otherwise the worker does it later."""
        embedder = self.res.embedder
        if embedder is None or not texts:
            return [None] * len(texts), None
        try:
            vectors = await asyncio.wait_for(
                embedder.embed(texts), self.settings.embedding_timeout_s
            )
        except (EmbeddingError, TimeoutError) as exc:
            log.warning("embedding deferred to the worker: %s", exc)
            return [None] * len(texts), None
        return list(vectors), embedder.model

    # --- add -------------------------------------------------------------------------------

    def check_batch_size(self, n: int) -> None:
        if n > self.settings.max_batch_size:
            raise PayloadTooLarge(
                f"a batch holds at most {self.settings.max_batch_size} memories; got {n}",
                field="memories",
                limit=self.settings.max_batch_size,
            )

    async def add_many(self, robot_name: str, bodies: list[MemoryCreate]) -> list[MemoryAdded]:
        """All or nothing: every memory is stored, or none is."""
        for i, body in enumerate(bodies):
            self._check(body, i if len(bodies) > 1 else None)
        keys = [b.key for b in bodies if b.key]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise Conflict(f"keys repeated within the batch: {', '.join(dupes)}", keys=dupes)

        robot = await self.robots.ensure(robot_name)
        todo = [i for i, b in enumerate(bodies) if b.embedding is None]
        vectors, model = await self._embed([bodies[i].content for i in todo])
        embeddings: list[list[float] | None] = [b.embedding for b in bodies]
        models: list[str | None] = ["client" if b.embedding else None for b in bodies]
        for i, v in zip(todo, vectors, strict=True):
            embeddings[i], models[i] = v, model if v is not None else None
        tokens = self.res.tokenizer.count_many([b.content for b in bodies])

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
        claimed, now = await self.repo.add(
            self.caller.namespace_id,
            robot.id,
            drafts,
            self.events.clock() if self.events.clock else None,
        )
        taken = sorted({d.key for d in drafts} - claimed.keys())
        if taken:
            raise Conflict(
                f"key already exists in this namespace: {', '.join(taken)}; "
                "use PUT /v1/robots/{robot}/memories/{key} to update",
                keys=taken,
            )
        if now is None:  # nothing claimed and nothing taken: an empty batch
            return []
        new = [
            NewMemory(
                id=claimed[d.key][0],
                created_at=claimed[d.key][1],
                key=d.key,
                content=d.content,
                type=d.type,
                importance=d.importance,
                tags=d.tags,
                metadata=d.metadata,
                author_robot_id=robot.id,
                token_count=d.token_count,
                embedding=d.embedding,
                embedding_model=d.embedding_model,
            )
            for d in drafts
        ]
        # Durable first (invariant 1): the memories are committed before anything touches
        # working memory, so no Redis failure can lose an acknowledged memory.
        await self.session.commit()

        # What follows only mirrors working memory: it need not wait for the WAL flush.
        outcomes = await self.working_memory.place(
            robot, [Placement.of(m) for m in new], durable=False
        )
        # Everything the response shows was just written: no need to read it back.
        return [
            MemoryAdded(
                id=m.id,
                key=m.key,
                content=m.content,
                type=m.type,
                importance=m.importance,
                tags=m.tags,
                metadata=m.metadata,
                author=robot.name,
                token_count=m.token_count,
                embedding_status="ready" if m.embedding is not None else "pending",
                embedding_model=m.embedding_model,
                created_at=m.created_at,
                updated_at=now,  # the insert's now(): same transaction as claim()
                deleted_at=None,
                created=True,
                working_memory=outcomes[m.key],
            )
            for m in new
        ]

    async def add(self, robot_name: str, body: MemoryCreate) -> MemoryAdded:
        return (await self.add_many(robot_name, [body]))[0]

    async def upsert(self, robot_name: str, key: str, body: MemoryFields) -> MemoryAdded:
        """Idempotent PUT: create the key, or replace its fields (reviving a soft delete)."""
        self._check(body)
        existing = await self.repo.get(self.caller.namespace_id, key)
        if existing is None:
            return await self.add(robot_name, MemoryCreate(**body.model_dump(), key=key))

        robot = await self.robots.ensure(robot_name)
        changed = existing.content != body.content
        vector, model = body.embedding, "client" if body.embedding else None
        if vector is None and changed:
            [vector], model = await self._embed([body.content])
        existing = await self.repo.get(self.caller.namespace_id, key, for_update=True)
        if existing is None:  # hard-deleted meanwhile
            raise NotFound(f"memory {key!r} was deleted while it was being updated")
        m = NewMemory(
            id=existing.id,
            created_at=body.created_at or existing.created_at,
            key=key,
            content=body.content,
            type=body.type,
            importance=body.importance,
            tags=body.tags,
            metadata=body.metadata,
            author_robot_id=existing.author_robot_id,
            token_count=self.res.tokenizer.count(body.content),
            embedding=vector,
            embedding_model=model,
        )
        await self.repo.update(existing.id, existing.created_at, m, changed)
        await self.events.record(
            self.caller.namespace_id, "add", robot.id, [existing.id], {"upsert": True}
        )
        await self.session.commit()  # durable first, as in add_many

        # Everyone holding the old version drops it; the writer gets the new one.
        await self.working_memory.remove_everywhere(existing.id, key)
        outcome = (await self.working_memory.place(robot, [Placement.of(m)], durable=False))[key]
        [row] = await self.repo.get_many([existing.id])
        return MemoryAdded(**to_read(row).model_dump(), created=False, working_memory=outcome)

    # --- read ------------------------------------------------------------------------------

    async def _get(self, key: str, include_deleted: bool = False) -> Any:
        row = await self.repo.get(self.caller.namespace_id, key)
        if row is None or (row.deleted_at is not None and not include_deleted):
            raise NotFound(f"memory {key!r} does not exist")
        return row

    async def retrieve(self, robot_name: str, key: str, include_deleted: bool) -> MemoryRead:
        row = await self._get(key, include_deleted)
        robot = await self.robots.ensure(robot_name)
        # A read: its log row (and the touch) need not wait for the WAL flush.
        await self.events.record(
            self.caller.namespace_id, "access", robot.id, [row.id], durable=False
        )
        if row.deleted_at is None:
            await self.working_memory.touch(robot, row.id, key)
        return to_read(row)

    async def list(
        self,
        robot_name: str,
        scope: str,
        filters: ListFilters,
        limit: int,
        after: tuple[datetime, int] | None,
    ) -> list[MemoryRead]:
        if scope == "self":
            robot = await self.robots.require(robot_name)
            filters = ListFilters(**{**filters.__dict__, "author_robot_id": robot.id})
        return [
            to_read(r)
            for r in await self.repo.list(self.caller.namespace_id, filters, limit, after)
        ]

    # --- forget / restore ------------------------------------------------------------------

    async def forget(
        self, robot_name: str, key: str, hard: bool, confirm: str | None
    ) -> MemoryRead:
        """Soft delete by default (restorable); hard delete only when `confirm` repeats the key."""
        row = await self._get(key, include_deleted=hard)
        if hard and confirm != key:
            raise BadRequest(
                "a hard delete is permanent: repeat the memory's key in `confirm` to proceed",
                field="confirm",
            )
        robot = await self.robots.ensure(robot_name)
        # Out of every robot's working memory first: a hard delete drops the membership rows
        # that say who holds it.
        await self.working_memory.remove_everywhere(row.id, key)
        if hard:
            await self.repo.hard_delete(row.id, row.created_at)
        else:
            await self.repo.set_deleted(row.id, row.created_at, True)
        await self.events.record(
            self.caller.namespace_id, "forget", robot.id, [row.id], {"hard": hard, "key": key}
        )
        if hard:
            return to_read(row)
        return to_read(await self._get(key, include_deleted=True))

    async def restore(self, robot_name: str, key: str) -> MemoryRead:
        row = await self._get(key, include_deleted=True)
        if row.deleted_at is None:
            return to_read(row)
        robot = await self.robots.ensure(robot_name)
        await self.repo.set_deleted(row.id, row.created_at, False)
        await self.events.record(self.caller.namespace_id, "restore", robot.id, [row.id])
        return to_read(await self._get(key))


__all__ = ["MemoryService", "Robot", "WorkingMemoryOutcome", "to_read"]
