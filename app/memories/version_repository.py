"""All SQL for memory versions (migration 0006): the replaced versions kept in
memory_version, and reading a memory's history with its current version on top."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

_FIELDS = (
    "version, content, type, importance, confidence, source, tags, metadata, created_at, "
    "token_count, embedding_status, embedding_model, valid_from, valid_to, superseded_by"
)

# The current version (from the memory row; NULL changed_*: version 1, by its author, at
# created_at) and the kept ones, each with who wrote it and when.
_HISTORY = f"""
    SELECT h.*, rb.name AS changed_by
    FROM (
        SELECT {_FIELDS}, coalesce(changed_by_robot_id, author_robot_id) AS changed_by_id,
               coalesce(changed_at, created_at) AS changed_at, true AS current
        FROM memory WHERE id = :id AND created_at = :c
        UNION ALL
        SELECT {_FIELDS}, changed_by_robot_id, changed_at, false
        FROM memory_version WHERE memory_id = :id
    ) AS h LEFT JOIN robot rb ON rb.id = h.changed_by_id"""


# Each memory of the namespace as its version current at :as_of (the newest written at or
# before it; a memory added later has none), under the alias `m` with the columns
# `read_columns` selects: the version's fields, the memory's identity (key, author; its access
# counts read by id). One pass over the namespace's rows and its kept versions: a read of what
# was believed then is a read of the namespace.
_VERSION_COLUMNS = (
    "content, type, importance, confidence, source, tags, metadata, created_at, token_count, "
    "embedding_status, embedding_model, valid_from, valid_to, superseded_by"
)
_IDENTITY = (
    "key, namespace_id, author_robot_id, deleted_at, search_text, archived, visibility, "
    "readers, group_id, pool_id"
)
_OF = ", ".join
AS_OF = f"""(
        SELECT DISTINCT ON (h.id) h.*, h.changed_at AS updated_at
        FROM (
            SELECT id, version, {_VERSION_COLUMNS}, coalesce(changed_at, created_at) AS changed_at,
                   {_IDENTITY}
            FROM memory WHERE namespace_id = :ns
            UNION ALL
            SELECT v.memory_id, v.version, {_OF("v." + c for c in _VERSION_COLUMNS.split(", "))},
                   v.changed_at, {_OF("o." + c for c in _IDENTITY.split(", "))}
            FROM memory_version v JOIN memory o ON o.id = v.memory_id AND o.namespace_id = :ns
        ) AS h
        WHERE h.changed_at <= :as_of
        ORDER BY h.id, h.version DESC
    ) AS m JOIN robot r ON r.id = m.author_robot_id"""


class VersionRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def keep(self, id_: int, created_at: datetime) -> None:
        """Copy the memory's current version into its history, before a replace overwrites
        it (the row is locked by then)."""
        await self.session.execute(
            sql(f"""
            INSERT INTO memory_version (memory_id, {_FIELDS}, changed_by_robot_id, changed_at)
            SELECT id, {_FIELDS}, coalesce(changed_by_robot_id, author_robot_id),
                   coalesce(changed_at, created_at)
            FROM memory WHERE id = :id AND created_at = :c"""),
            {"id": id_, "c": created_at},
        )

    async def history(
        self, id_: int, created_at: datetime, limit: int, before: int | None
    ) -> list[Any]:
        """Newest first: versions below `before` (all when None), at most `limit`."""
        return list(
            (
                await self.session.execute(
                    sql(f"""
                    {_HISTORY}
                    WHERE CAST(:before AS int) IS NULL OR h.version < CAST(:before AS int)
                    ORDER BY h.version DESC
                    LIMIT :limit"""),
                    {"id": id_, "c": created_at, "before": before, "limit": limit},
                )
            ).all()
        )

    async def at(self, id_: int, created_at: datetime, instant: datetime) -> Any | None:
        """The version current at `instant`: the newest written at or before it."""
        return (
            await self.session.execute(
                sql(f"""
                {_HISTORY}
                WHERE h.changed_at <= :at
                ORDER BY h.version DESC
                LIMIT 1"""),
                {"id": id_, "c": created_at, "at": instant},
            )
        ).one_or_none()

    async def get(self, id_: int, created_at: datetime, version: int) -> Any | None:
        return (
            await self.session.execute(
                sql(f"{_HISTORY} WHERE h.version = :version"),
                {"id": id_, "c": created_at, "version": version},
            )
        ).one_or_none()
