"""All SQL for pools: the pool rows and their grants, a pool's statistics, and the robots
holding a pool's memories in working memory that may no longer read them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.session import DbSession
from app.db.sql import sql
from app.visibility import pool_grants

_COLUMNS = (
    "id, name, type, readers, writers, public_read, expires_at, archived_at, created_at, updated_at"
)
# A robot (`r`) may read pool `p` now.
MAY_READ = pool_grants("r.name")
# No :reader (the namespace's caller), or the robot :reader may read pool `p` now.
_READ_BY = f"(CAST(:reader AS text) IS NULL OR {pool_grants('CAST(:reader AS text)')})"


class PoolRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def get(
        self, namespace_id: int, name: str, *, lock: bool = False, reader: str | None = None
    ) -> Any | None:
        """The pool; with `reader`, only if that robot may read it now."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS}, archived_at IS NULL
                       AND (expires_at IS NULL OR expires_at > now()) AS open
                FROM pool p WHERE namespace_id = :ns AND name = :name AND {_READ_BY}
                {"FOR UPDATE" if lock else ""}"""),
                {"ns": namespace_id, "name": name, "reader": reader},
            )
        ).one_or_none()

    async def now(self) -> datetime:
        """The instant expiries are compared with (the transaction's: `expired`, `open`)."""
        return (await self.session.execute(sql("SELECT now()"))).scalar_one()  # type: ignore[no-any-return]

    async def in_namespace(self, namespace_id: int, reader: str | None = None) -> list[Any]:
        """The namespace's pools; with `reader`, those that robot may read now."""
        return list(
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS} FROM pool p WHERE namespace_id = :ns AND {_READ_BY}
                ORDER BY name"""),
                {"ns": namespace_id, "reader": reader},
            )
        )

    async def put(
        self,
        namespace_id: int,
        name: str,
        type_: str,
        *,
        readers: list[str],
        writers: list[str],
        public_read: bool,
        expires_at: datetime | None,
    ) -> Any:
        """Create the pool or replace its settings (reviving an archived one)."""
        return (
            await self.session.execute(
                sql(f"""
                INSERT INTO pool (namespace_id, name, type, readers, writers, public_read,
                                  expires_at)
                VALUES (:ns, :name, :type, :readers, :writers, :public, :expires)
                ON CONFLICT (namespace_id, name) DO UPDATE SET
                    type = EXCLUDED.type, readers = EXCLUDED.readers,
                    writers = EXCLUDED.writers, public_read = EXCLUDED.public_read,
                    expires_at = EXCLUDED.expires_at, archived_at = NULL, updated_at = now()
                RETURNING {_COLUMNS}"""),
                {
                    "ns": namespace_id,
                    "name": name,
                    "type": type_,
                    "readers": readers,
                    "writers": writers,
                    "public": public_read,
                    "expires": expires_at,
                },
            )
        ).one()

    async def archive(self, pool_id: int) -> Any:
        return (
            await self.session.execute(
                sql(f"""
                UPDATE pool SET archived_at = coalesce(archived_at, now()), updated_at = now()
                WHERE id = :id RETURNING {_COLUMNS}"""),
                {"id": pool_id},
            )
        ).one()

    async def expired(self, namespace_id: int) -> list[Any]:
        """Task pools past their expiry not yet archived."""
        return list(
            await self.session.execute(
                sql("""
                SELECT id, name FROM pool
                WHERE namespace_id = :ns AND archived_at IS NULL AND expires_at <= now()
                ORDER BY name"""),
                {"ns": namespace_id},
            )
        )

    async def stats(self, pool_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql("""
                SELECT r.name AS author, count(*) AS memories, sum(m.token_count) AS tokens
                FROM memory m JOIN robot r ON r.id = m.author_robot_id
                WHERE m.pool_id = :id AND m.deleted_at IS NULL
                GROUP BY r.name ORDER BY r.name"""),
                {"id": pool_id},
            )
        )

    async def lost_holders(self, pool_id: int) -> list[Any]:
        """(robot id, robot name, memory id, key) of the pool's memories held in the working
        memory of a robot that may no longer read the pool."""
        return list(
            await self.session.execute(
                sql(f"""
                SELECT w.robot_id, r.name AS robot, m.id AS memory_id, m.key
                FROM working_memory_item w
                JOIN memory m ON m.namespace_id = w.namespace_id AND m.id = w.memory_id
                                 AND m.created_at = w.memory_created_at
                JOIN robot r ON r.id = w.robot_id
                JOIN pool p ON p.id = m.pool_id
                WHERE m.pool_id = :id AND w.in_working_memory AND NOT {MAY_READ}
                ORDER BY w.robot_id, m.id"""),
                {"id": pool_id},
            )
        )
