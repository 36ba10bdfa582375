from __future__ import annotations

import time
from typing import Any

from app.auth import keys
from app.auth.repository import ApiKeyRepository
from app.auth.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyRead
from app.db.session import DbSession, Sessionmaker
from app.errors import NotFound


def _read(row: Any) -> ApiKeyRead:
    return ApiKeyRead(
        id=row.id,
        name=row.name,
        role=row.role,
        prefix=row.prefix,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


class KeyCache:
    """hash → (namespace_id, namespace, role, key id) for a few seconds, so a request does not
    pay a database round trip for its key. Revocations through this process clear it at
    once; a revocation by another process takes effect within `ttl_s`."""

    def __init__(self, ttl_s: float = 10.0) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[bytes, tuple[float, tuple[int, str, str, int]]] = {}

    def get(self, key_hash: bytes) -> tuple[int, str, str, int] | None:
        hit = self._entries.get(key_hash)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key_hash: bytes, value: tuple[int, str, str, int]) -> None:
        self._entries[key_hash] = (time.monotonic() + self.ttl_s, value)

    def clear(self) -> None:
        self._entries.clear()


async def authenticate(
    sessionmaker: Sessionmaker, cache: KeyCache, key: str
) -> tuple[int, str, str, int] | None:
    """(namespace_id, namespace, role, key id) for a valid, unrevoked key; else None."""
    h = keys.digest(key)
    cached = cache.get(h)
    if cached is not None:
        return cached
    async with sessionmaker() as session, session.begin():
        repo = ApiKeyRepository(session)
        row = await repo.by_hash(h)
        if row is None or not keys.matches(key, row.key_hash):
            return None
        await repo.touch(row.id)
    value = (row.namespace_id, row.namespace, row.role, row.id)
    cache.put(h, value)
    return value


class ApiKeyService:
    def __init__(self, session: DbSession, namespace_id: int, cache: KeyCache) -> None:
        self.repo = ApiKeyRepository(session)
        self.namespace_id = namespace_id
        self.cache = cache

    async def create(self, namespace: str, body: ApiKeyCreate) -> ApiKeyCreated:
        secret = keys.generate()
        row = await self.repo.create(
            self.namespace_id,
            body.name,
            body.role,
            keys.digest(secret),
            keys.display_prefix(secret),
        )
        return ApiKeyCreated(**_read(row).model_dump(), namespace=namespace, key=secret)

    async def list(self) -> list[ApiKeyRead]:
        return [_read(r) for r in await self.repo.list(self.namespace_id)]

    async def revoke(self, key_id: int) -> ApiKeyRead:
        row = await self.repo.revoke(self.namespace_id, key_id)
        if row is None:
            raise NotFound(f"API key {key_id} does not exist")
        self.cache.clear()
        return _read(row)
