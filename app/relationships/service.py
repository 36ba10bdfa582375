"""Relationships between memories: explicit links written and removed, and what a memory is
related to. The derived edges (shared tags, supersede, derived-from) are kept by migration
0023's trigger in every write's own transaction; nothing here maintains them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.errors import Conflict, NotFound, Unprocessable
from app.relationships.repository import LinkRepository
from app.relationships.schemas import LinkCreate, LinkRead, Related, RelatedMemory, Unlinked
from app.visibility import Reader


class LinkService:
    def __init__(self, *, repo: LinkRepository, namespace_id: int) -> None:
        self.repo = repo
        self.namespace_id = namespace_id

    async def _named(self, robot: str, *keys: str) -> list[Any]:
        """The memories of `keys` that `robot` may read (404 for one it may not)."""
        found = await self.repo.named(self.namespace_id, keys, Reader(self.namespace_id, robot))
        missing = [k for k in keys if k not in found]
        if missing:
            raise NotFound(f"memory {missing[0]!r} does not exist")
        return [found[k] for k in keys]

    async def link(self, robot: str, key: str, body: LinkCreate) -> LinkRead:
        """`key` is `type` to `body.target`; a repeat sets the weight (200, not 201)."""
        if body.target == key:
            raise Unprocessable(
                "a memory cannot be linked to itself",
                errors=[{"field": "target", "message": "the memory's own key"}],
            )
        source, target = await self._named(robot, key, body.target)
        if body.type == "supersedes":
            await self._no_cycle(robot, source.id, target.id)
        row = await self.repo.link(
            self.namespace_id,
            source.id,
            target.id,
            type_=body.type,
            weight=body.weight,
        )
        return LinkRead(
            source=key,
            target=body.target,
            type=row.type,
            weight=row.weight,
            origin=row.origin,
            created_at=row.created_at,
            created=row.created,
        )

    async def adopt(self, key: str, body: LinkCreate) -> bool:
        """An exported explicit link (`htm import`), between the memories of those keys,
        deleted ones too (the operator reads every memory, and a soft delete keeps a
        memory's links). Whether it was written: the same link with the same weight is
        there already."""
        ids = await self.repo.ids(self.namespace_id, [key, body.target])
        missing = [k for k in (key, body.target) if k not in ids]
        if missing:
            raise NotFound(f"memory {missing[0]!r} does not exist")
        source, target = ids[key], ids[body.target]
        if await self.repo.explicit_weight(source, target, body.type) == body.weight:
            return False
        await self.repo.link(self.namespace_id, source, target, type_=body.type, weight=body.weight)
        return True

    async def _no_cycle(self, robot: str, source: int, target: int) -> None:
        """409 when `target` already supersedes `source`, directly or through others: the
        link would make a cycle (a fact that replaces itself). The chain is named, a memory
        the robot may not read by a placeholder."""
        path = await self.repo.supersede_path(self.namespace_id, source, target)
        if not path:
            return
        keys = await self.repo.keys(self.namespace_id, path, Reader(self.namespace_id, robot))
        cycle = [path[-1], *path[:-1]]  # the link's source, its target, ... back to source
        shown = [keys[i][0] if keys[i][1] else None for i in cycle]
        chain = " supersedes ".join(k or "(a memory you cannot read)" for k in [*shown, shown[0]])
        raise Conflict(
            f"a supersede cycle: {chain}; the link would make a memory supersede itself",
            keys=[k for k in shown if k is not None],
        )

    async def unlink(self, robot: str, key: str, target: str, type_: str | None) -> Unlinked:
        """Removes explicit links only (the derived ones follow the memories)."""
        source, dest = await self._named(robot, key, target)
        types = await self.repo.unlink(
            self.namespace_id,
            source.id,
            dest.id,
            type_,
        )
        if not types:
            raise NotFound(f"no explicit link from {key!r} to {target!r}")
        return Unlinked(source=key, target=target, types=sorted(types))

    async def related(
        self, robot: str, key: str, depth: int, *, limit: int, types: Sequence[str] | None
    ) -> Related:
        """What `robot` may read around `key`, walking only through what it may read."""
        [start] = await self._named(robot, key)
        reader = Reader(self.namespace_id, robot)
        rows = await self.repo.related(
            self.namespace_id, start, depth, limit=limit, types=types, reader=reader
        )
        return Related(
            key=key,
            depth=depth,
            memories=[
                RelatedMemory(
                    key=r.key,
                    content=r.content,
                    type=r.memory_type,
                    tags=list(r.tags),
                    created_at=r.created_at,
                    depth=r.depth,
                    weight=r.weight,
                    edge=r.type,
                    direction=r.direction,
                    via=r.via,
                )
                for r in rows
            ],
        )
