"""Entities: what a robot's memories name (app/entities/extract.py), with counts, and a
namespace's aliases. "Everything about X" is a memory listing filtered by the entity
(`ListFilters.entity`, app/memories/reads.py), so visibility, validity and paging are the
listing's own."""

from __future__ import annotations

import base64
import json

from app.clock import Clock
from app.common import INT64_MAX, Page
from app.entities.extract import MAX_ENTITY_CHARS, normalise
from app.entities.repository import EntityRepository
from app.entities.schemas import EntityAliases, EntityRead
from app.errors import BadRequest, Unprocessable
from app.timeframes.validity import Validity
from app.visibility import Reader


def entity_key(name: str, field: str = "entity") -> str:
    """A name as an entity key (app/entities/extract.normalise), or 422 when nothing of it is
    left or it is longer than any stored key."""
    key = normalise(name)
    if not key or len(key) > MAX_ENTITY_CHARS:
        message = f"not an entity: 1-{MAX_ENTITY_CHARS} characters once normalised"
        raise Unprocessable(message, errors=[{"field": field, "message": message}])
    return key


def encode_cursor(memories: int, entity: str) -> str:
    raw = json.dumps([memories, entity]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """What encode_cursor made, or 400."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        memories, entity = json.loads(raw)
        if type(memories) is not int or not 1 <= memories <= INT64_MAX:
            raise ValueError("count out of range")
        if not isinstance(entity, str) or entity_key(entity) != entity:
            raise ValueError("not an entity key")
    except Exception as exc:
        raise BadRequest("cursor is not one this service issued", field="cursor") from exc
    return memories, entity


class EntityService:
    def __init__(
        self, *, repo: EntityRepository, reads: EntityRepository, namespace_id: int, clock: Clock
    ) -> None:
        self.repo = repo
        self.reads = reads  # the listing's (a replica's or the primary's: app/db/replicas.py)
        self.namespace_id = namespace_id
        self.clock = clock

    async def list(
        self, robot_name: str, *, kind: str | None, limit: int, cursor: str | None
    ) -> Page[EntityRead]:
        """The entities of the current memories the robot may read, most memories first."""
        after = decode_cursor(cursor) if cursor else None
        rows = await self.reads.listing(
            self.namespace_id,
            reader=Reader(self.namespace_id, robot_name),
            valid=Validity.now(self.clock()),
            kind=kind,
            limit=limit + 1,
            after=after,
        )
        items = [
            EntityRead(
                entity=r.entity, kinds=list(r.kinds), memories=r.memories, latest_at=r.latest_at
            )
            for r in rows[:limit]
        ]
        more = len(rows) > limit
        last = items[-1] if items else None
        next_cursor = encode_cursor(last.memories, last.entity) if more and last else None
        return Page[EntityRead](items=items, next_cursor=next_cursor)

    async def aliases(self) -> EntityAliases:
        return EntityAliases(aliases=await self.repo.aliases(self.namespace_id))

    async def set_aliases(self, body: EntityAliases) -> EntityAliases:
        """Replaces the namespace's map (validated and normalised by the model)."""
        await self.repo.set_aliases(self.namespace_id, body.aliases)
        return EntityAliases(aliases=await self.repo.aliases(self.namespace_id))
