from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.auth import keys
from app.auth.repository import ApiKeyRepository
from app.auth.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyRead
from app.cache import TtlCache
from app.db.session import DbSession, Sessionmaker
from app.errors import NotFound


def _read(row: Any) -> ApiKeyRead:
    return ApiKeyRead(
        id=row.id,
        name=row.name,
        role=row.role,
        robot=row.robot,
        prefix=row.prefix,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


# (namespace_id, namespace, role, key id, the robot it is bound to or None)
Identity = tuple[int, str, str, int, str | None]


@dataclass(frozen=True)
class Lookup:
    """When a database lookup of a key began, and the cache's generation then."""

    generation: int
    started: float


class KeyCache:
    """Key hash → Identity, so most requests pay no database round trip for their key.

    A revocation reaches every other process as a message on the invalidation channel
    (app/invalidation: `revoked` announces it; milliseconds). Authentication never depends
    on that channel: when it cannot deliver (Redis down), a revocation is still in force in
    every process within `ttl_s` (1 s), since a positive entry lives `ttl_s` from the start
    of the lookup that read it and so never outlives a revocation committed after that read
    by more than `ttl_s`. The TTL costs one indexed lookup per active key, per process, per
    second.

    In this process a revocation is immediate: the revoke clears the cache once its
    transaction has committed, and bumps the generation so that a lookup that was already
    running (it may have read the row before the revoke committed) cannot put its stale
    answer back afterwards.

    Unknown (or revoked) well-formed keys are remembered too, at most `unknown_max` of them
    for `unknown_ttl_s`, oldest dropped first, so a client retrying a revoked or mistyped key
    costs no lookups. A key cannot turn valid after it was first presented (its 256 random
    bits are made at creation), so this never rejects a good key. Malformed tokens never get
    here (keys.well_formed).
    """

    def __init__(
        self, ttl_s: float = 1.0, unknown_ttl_s: float = 60.0, unknown_max: int = 1024
    ) -> None:
        self.generation = 0
        self._known: TtlCache[bytes, Identity] = TtlCache(ttl_s, 4096)
        self._unknown: TtlCache[bytes, bool] = TtlCache(unknown_ttl_s, unknown_max)
        # Tells the other processes of a revocation (app/invalidation, wired by the lifespan).
        self.announce: Callable[[], None] | None = None

    def get(self, key_hash: bytes) -> Identity | None:
        return self._known.get(key_hash)

    def caches(self) -> dict[str, TtlCache[bytes, Any]]:
        """The two caches by name, for /metrics' hit ratios."""
        return {"api_keys": self._known, "unknown_api_keys": self._unknown}

    def lookup(self) -> Lookup:
        """Call before reading a key from the database; hand the result to put()."""
        return Lookup(self.generation, self._known.clock())

    def put(self, key_hash: bytes, value: Identity, lookup: Lookup) -> None:
        if lookup.generation != self.generation:
            return  # a revocation cleared the cache during this lookup: it may be stale
        self._known.put(key_hash, value, since=lookup.started)

    def is_unknown(self, key_hash: bytes) -> bool:
        return key_hash in self._unknown

    def put_unknown(self, key_hash: bytes) -> None:
        self._unknown.put(key_hash, True)

    def clear(self) -> None:
        """Forget every known key here (another process announced a revocation)."""
        self.generation += 1
        self._known.clear()

    def revoked(self) -> None:
        """A revocation committed: forget every known key here and in every other process."""
        self.clear()
        if self.announce is not None:
            self.announce()


async def authenticate(sessionmaker: Sessionmaker, cache: KeyCache, key: str) -> Identity | None:
    """The identity of a valid, unrevoked key; else None.

    Only the throttled last_used_at (ApiKeyRepository.touch, at most once a minute per key)
    is ever written here: a request with a reader key writes nothing else on its way in.
    """
    if not keys.well_formed(key):
        return None
    h = keys.digest(key)
    cached = cache.get(h)
    if cached is not None:
        return cached
    if cache.is_unknown(h):
        return None
    lookup = cache.lookup()
    async with sessionmaker() as session, session.begin():
        repo = ApiKeyRepository(session)
        row = await repo.by_hash(h)
        if row is None or not keys.matches(key, row.key_hash):
            cache.put_unknown(h)
            return None
        if row.touch_due:
            await repo.touch(row.id)
    value = (row.namespace_id, row.namespace, row.role, row.id, row.robot)
    cache.put(h, value, lookup)
    return value


class ApiKeyService:
    def __init__(self, *, session: DbSession, namespace_id: int, cache: KeyCache) -> None:
        self.session = session
        self.repo = ApiKeyRepository(session)
        self.namespace_id = namespace_id
        self.cache = cache

    async def create(self, namespace: str, body: ApiKeyCreate) -> ApiKeyCreated:
        secret = keys.generate()
        row = await self.repo.create(
            self.namespace_id,
            body.name,
            body.role,
            key_hash=keys.digest(secret),
            prefix=keys.display_prefix(secret),
            robot=body.robot,
        )
        return ApiKeyCreated(**_read(row).model_dump(), namespace=namespace, key=secret)

    async def list(self) -> list[ApiKeyRead]:
        return [_read(r) for r in await self.repo.list(self.namespace_id)]

    async def revoke(self, key_id: int) -> ApiKeyRead:
        row = await self.repo.revoke(self.namespace_id, key_id)
        if row is None:
            raise NotFound(f"API key {key_id} does not exist")
        # Cleared after the commit, not now: a lookup starting before the commit still reads
        # the unrevoked row. Clearing bumps the generation, so no lookup that started before
        # the clear can put its answer back.
        self.session.after_commit(self.cache.revoked)
        return _read(row)
