"""All SQL for memories: keys, rows, soft/hard delete, listing, and pending embeddings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.db.sql import sql

# Selected with the author's name so a memory is read in one round trip.
_READ = """
    m.id, m.key, m.content, m.type, m.importance, m.tags, m.metadata, r.name AS author,
    m.author_robot_id, m.token_count, m.embedding_status, m.embedding_model,
    m.created_at, m.updated_at, m.deleted_at"""


_CLAIM = sql("""
    WITH input AS (
        SELECT k, c, ord
        FROM unnest(CAST(:keys AS text[]), CAST(:cs AS timestamptz[]))
             WITH ORDINALITY AS t(k, c, ord)
    ), claimed AS (
        INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
        SELECT :ns, k, nextval('memory_id_seq'), coalesce(c, now()) FROM input ORDER BY ord
        ON CONFLICT (namespace_id, key) DO NOTHING
        RETURNING key, memory_id, memory_created_at
    ), events AS (
        INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, at)
        SELECT :ns, :robot, memory_id, 'add', coalesce(CAST(:at AS timestamptz), now())
        FROM claimed
    )
    SELECT key, memory_id, memory_created_at, now() AS now FROM claimed""")


@dataclass
class NewMemory:
    id: int
    created_at: datetime
    key: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    author_robot_id: int
    token_count: int
    embedding: list[float] | None
    embedding_model: str | None


@dataclass(frozen=True)
class ListFilters:
    author_robot_id: int | None = None
    type: str | None = None
    tags_any: list[str] | None = None
    min_importance: float | None = None
    start: datetime | None = None
    end: datetime | None = None
    include_deleted: bool = False


class MemoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def claim(
        self,
        namespace_id: int,
        robot_id: int,
        keys: list[str],
        created_at: list[datetime | None],
        event_at: datetime | None,
    ) -> tuple[dict[str, tuple[int, datetime]], datetime | None]:
        """Claim keys in the namespace, numbering the new memories and logging their `add`
        events, in one round trip. Returns {key: (id, created_at)} for the keys claimed (a
        key already taken is missing: the caller answers 409 and the transaction rolls
        back, events included) and the transaction's now(), the default created_at."""
        rows = (
            await self.session.execute(
                _CLAIM,
                {
                    "ns": namespace_id,
                    "robot": robot_id,
                    "keys": keys,
                    "cs": created_at,
                    "at": event_at,
                },
            )
        ).all()
        claimed = {r.key: (r.memory_id, r.memory_created_at) for r in rows}
        return claimed, rows[0].now if rows else None

    async def insert(self, namespace_id: int, memories: list[NewMemory]) -> None:
        await self.session.execute(
            sql("""
            INSERT INTO memory (id, created_at, updated_at, namespace_id, key, content, type,
                                importance, tags, metadata, author_robot_id, token_count,
                                embedding, embedding_model, embedding_status)
            VALUES (:id, :created_at, now(), :ns, :key, :content, :type, :importance, :tags,
                    CAST(:metadata AS jsonb), :author, :tokens, :embedding, :model,
                    CASE WHEN CAST(:embedding AS vector) IS NULL
                         THEN 'pending' ELSE 'ready' END)"""),
            [
                {
                    "id": m.id,
                    "created_at": m.created_at,
                    "ns": namespace_id,
                    "key": m.key,
                    "content": m.content,
                    "type": m.type,
                    "importance": m.importance,
                    "tags": m.tags,
                    "metadata": json.dumps(m.metadata),
                    "author": m.author_robot_id,
                    "tokens": m.token_count,
                    "embedding": m.embedding,
                    "model": m.embedding_model,
                }
                for m in memories
            ],
        )

    async def get(self, namespace_id: int, key: str, *, for_update: bool = False) -> Any | None:
        lock = "FOR UPDATE OF m" if for_update else ""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_READ}
                FROM memory_key k
                JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                JOIN robot r ON r.id = m.author_robot_id
                WHERE k.namespace_id = :ns AND k.key = :key
                {lock}"""),
                {"ns": namespace_id, "key": key},
            )
        ).one_or_none()

    async def get_many(self, ids: list[int]) -> list[Any]:
        rows = (
            await self.session.execute(
                sql(f"""
                SELECT {_READ}
                FROM memory m JOIN robot r ON r.id = m.author_robot_id
                WHERE m.id = ANY(:ids)"""),
                {"ids": ids},
            )
        ).all()
        by_id = {r.id: r for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def update(
        self, id_: int, created_at: datetime, m: NewMemory, content_changed: bool
    ) -> None:
        """Replace the fields of an existing memory (an upsert of the same key).

        A changed created_at moves the row (the time column is part of the primary key and,
        on TimescaleDB, decides the chunk), so that case is a delete + insert with the same id.
        """
        if created_at != m.created_at:
            await self.session.execute(
                sql("DELETE FROM memory WHERE id = :id AND created_at = :c"),
                {"id": id_, "c": created_at},
            )
            ns = (
                await self.session.execute(
                    sql("SELECT namespace_id FROM memory_key WHERE memory_id = :id"),
                    {"id": id_},
                )
            ).scalar_one()
            await self.insert(ns, [m])
            await self.session.execute(
                sql("UPDATE memory_key SET memory_created_at = :c WHERE memory_id = :id"),
                {"id": id_, "c": m.created_at},
            )
            return
        await self.session.execute(
            sql("""
            UPDATE memory SET
                content = :content, type = :type, importance = :importance, tags = :tags,
                metadata = CAST(:metadata AS jsonb), token_count = :tokens,
                deleted_at = NULL, updated_at = now(),
                embedding = CASE WHEN :changed OR CAST(:embedding AS vector) IS NOT NULL
                                 THEN CAST(:embedding AS vector) ELSE embedding END,
                embedding_model = CASE WHEN :changed OR CAST(:embedding AS vector) IS NOT NULL
                                       THEN :model ELSE embedding_model END,
                embedding_status = CASE
                    WHEN CAST(:embedding AS vector) IS NOT NULL THEN 'ready'
                    WHEN :changed THEN 'pending' ELSE embedding_status END,
                embedding_attempts = CASE WHEN :changed THEN 0 ELSE embedding_attempts END,
                embedding_next_at = CASE WHEN :changed THEN NULL ELSE embedding_next_at END
            WHERE id = :id AND created_at = :c"""),
            {
                "id": id_,
                "c": created_at,
                "content": m.content,
                "type": m.type,
                "importance": m.importance,
                "tags": m.tags,
                "metadata": json.dumps(m.metadata),
                "tokens": m.token_count,
                "embedding": m.embedding,
                "model": m.embedding_model,
                "changed": content_changed,
            },
        )

    async def set_deleted(self, id_: int, created_at: datetime, deleted: bool) -> None:
        await self.session.execute(
            sql("""
            UPDATE memory SET deleted_at = CASE WHEN :deleted THEN now() END, updated_at = now()
            WHERE id = :id AND created_at = :c"""),
            {"id": id_, "c": created_at, "deleted": deleted},
        )

    async def hard_delete(self, id_: int, created_at: datetime) -> None:
        for statement in (
            "DELETE FROM working_memory_item WHERE memory_id = :id",
            "DELETE FROM memory_key WHERE memory_id = :id",
            "DELETE FROM memory WHERE id = :id AND created_at = :c",
        ):
            await self.session.execute(sql(statement), {"id": id_, "c": created_at})

    async def list(
        self, namespace_id: int, f: ListFilters, limit: int, after: tuple[datetime, int] | None
    ) -> list[Any]:
        """Newest first; keyset pagination on (created_at, id)."""
        where = ["m.namespace_id = :ns"]
        params: dict[str, Any] = {"ns": namespace_id, "limit": limit}
        if not f.include_deleted:
            where.append("m.deleted_at IS NULL")
        if f.author_robot_id is not None:
            where.append("m.author_robot_id = :author")
            params["author"] = f.author_robot_id
        if f.type is not None:
            where.append("m.type = :type")
            params["type"] = f.type
        if f.tags_any:
            where.append("m.tags && CAST(:tags AS text[])")
            params["tags"] = f.tags_any
        if f.min_importance is not None:
            where.append("m.importance >= :imp")
            params["imp"] = f.min_importance
        if f.start is not None:
            where.append("m.created_at >= :start")
            params["start"] = f.start
        if f.end is not None:
            where.append("m.created_at < :end")
            params["end"] = f.end
        if after is not None:
            where.append("(m.created_at, m.id) < (:after_c, :after_id)")
            params["after_c"], params["after_id"] = after
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    SELECT {_READ}
                    FROM memory m JOIN robot r ON r.id = m.author_robot_id
                    WHERE {" AND ".join(where)}
                    ORDER BY m.created_at DESC, m.id DESC
                    LIMIT :limit"""),
                    params,
                )
            ).all()
        )

    # --- pending embeddings (the background worker) ------------------------------------------

    async def claim_pending(self, limit: int) -> list[Any]:
        """Lock a batch of memories awaiting an embedding; concurrent workers skip each other."""
        return list(
            (
                await self.session.execute(
                    sql("""
                    SELECT id, created_at, content, embedding_attempts FROM memory
                    WHERE embedding_status = 'pending' AND deleted_at IS NULL
                      AND (embedding_next_at IS NULL OR embedding_next_at <= now())
                    ORDER BY embedding_next_at NULLS FIRST, id
                    LIMIT :limit
                    FOR UPDATE SKIP LOCKED"""),
                    {"limit": limit},
                )
            ).all()
        )

    async def set_embeddings(
        self, rows: list[tuple[int, datetime]], vectors: list[list[float]], model: str
    ) -> None:
        await self.session.execute(
            sql("""
            UPDATE memory SET embedding = :e, embedding_model = :model,
                   embedding_status = 'ready', embedding_error = NULL, embedding_next_at = NULL
            WHERE id = :id AND created_at = :c"""),
            [
                {"id": i, "c": c, "e": v, "model": model}
                for (i, c), v in zip(rows, vectors, strict=True)
            ],
        )

    async def postpone_embeddings(
        self, rows: list[tuple[int, datetime]], error: str, max_backoff_s: float
    ) -> None:
        """Exponential backoff per row: 2^attempts seconds, capped."""
        await self.session.execute(
            sql("""
            UPDATE memory SET embedding_attempts = embedding_attempts + 1,
                   embedding_error = :error,
                   embedding_next_at = now() + make_interval(
                       secs => least(power(2, embedding_attempts), :cap))
            WHERE id = :id AND created_at = :c"""),
            [{"id": i, "c": c, "error": error[:500], "cap": max_backoff_s} for i, c in rows],
        )
