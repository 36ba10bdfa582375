from __future__ import annotations

from typing import Any

from app.db.session import DbSession
from app.db.sql import sql

_COLUMNS = "k.id, k.name, k.role, k.robot, k.prefix, k.created_at, k.revoked_at, k.last_used_at"
# last_used_at is bookkeeping, precise to this interval: writing it on every lookup would
# make every authenticated request (reads included) a write.
TOUCH_INTERVAL = "interval '1 minute'"


class ApiKeyRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def by_hash(self, key_hash: bytes) -> Any | None:
        """The unrevoked key with this hash; `touch_due` says whether its last_used_at is
        older than TOUCH_INTERVAL (by the database's clock, as touch() compares)."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {_COLUMNS}, k.key_hash, k.namespace_id, n.name AS namespace,
                       (k.last_used_at IS NULL
                        OR k.last_used_at < now() - {TOUCH_INTERVAL}) AS touch_due
                FROM api_key k JOIN namespace n ON n.id = k.namespace_id
                WHERE k.key_hash = :h AND k.revoked_at IS NULL"""),
                {"h": key_hash},
            )
        ).one_or_none()

    async def create(
        self,
        namespace_id: int,
        name: str,
        role: str,
        *,
        key_hash: bytes,
        prefix: str,
        robot: str | None = None,
    ) -> Any:
        return (
            await self.session.execute(
                sql(f"""
                INSERT INTO api_key AS k (namespace_id, name, role, key_hash, prefix, robot)
                VALUES (:ns, :name, :role, :h, :prefix, :robot)
                RETURNING {_COLUMNS}"""),
                {
                    "ns": namespace_id,
                    "name": name,
                    "role": role,
                    "h": key_hash,
                    "prefix": prefix,
                    "robot": robot,
                },
            )
        ).one()

    async def list(self, namespace_id: int) -> list[Any]:
        return list(
            await self.session.execute(
                sql(f"SELECT {_COLUMNS} FROM api_key k WHERE k.namespace_id = :ns ORDER BY k.id"),
                {"ns": namespace_id},
            )
        )

    async def revoke(self, namespace_id: int, key_id: int) -> Any | None:
        return (
            await self.session.execute(
                sql(f"""
                UPDATE api_key AS k SET revoked_at = coalesce(revoked_at, now())
                WHERE k.id = :id AND k.namespace_id = :ns
                RETURNING {_COLUMNS}"""),
                {"id": key_id, "ns": namespace_id},
            )
        ).one_or_none()

    async def touch(self, key_id: int) -> None:
        """Record a use, unless one was recorded within TOUCH_INTERVAL (by another process,
        say): then the statement matches no row and writes nothing."""
        await self.session.execute(
            sql(f"""
            UPDATE api_key SET last_used_at = now()
            WHERE id = :id
              AND (last_used_at IS NULL OR last_used_at < now() - {TOUCH_INTERVAL})"""),
            {"id": key_id},
        )
