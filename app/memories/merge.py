"""`htm dedupe`: the near-duplicate clusters of a namespace, reported, and merged safely.

Finding: memories of one type with the same content are linked (both modes); in `semantic`
mode, so is each embedded memory and each of its nearest neighbours of its type whose cosine
similarity reaches the threshold. A cluster is a connected group of links. Its survivor is the
member with the highest importance, then the most accesses, then the oldest.

Merging one cluster takes two steps, each committed before the next, so no failure can lose
a member's information:
1. the survivor is reinforced (importance the max, tags the union, access counts the sum),
   as a new version by the merging robot;
2. each other member gets an alias to the survivor and is soft-deleted through the forget
   path (its holders let it go). Its key then resolves to the survivor
   (GET /v1/robots/{robot}/memories/{key}), and aliases to it move to the survivor.
A run cut off between the steps leaves the others live, and the next run merges them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.memories.dedupe import union
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.service import MemoryService
from app.memories.writes import fields_of
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from app.timeframes.validity import Validity

PAGE = 500
NEIGHBOURS = 10


@dataclass(frozen=True)
class Cluster:
    type: str
    survivor: str
    merged: list[str]  # the other members' keys, in the survivor order


class Merger:
    def __init__(self, *, service: MemoryService) -> None:
        self.service = service
        self.session = service.session
        self.ns = service.caller.namespace_id
        self.duplicates = DuplicateRepository(service.session)

    async def clusters(
        self, mode: str, threshold: float, type_: str | None = None
    ) -> list[Cluster]:
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def link(a: int, b: int) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        for ids in await self.duplicates.exact_groups(self.ns, type_):
            for other in ids[1:]:
                link(ids[0], other)
        if mode == "semantic":
            search = Search(
                self.session, self.service.settings.hnsw_ef_search, self.service.search_caches
            )
            after = 0
            current = Validity.now(self.service.clock())
            while page := await self.duplicates.embedded(self.ns, type_, after, PAGE):
                for row in page:
                    vector = [float(x) for x in row.embedding.strip("[]").split(",")]
                    filters = SearchFilters(types=[row.type], valid=current)
                    near = await search.vector(
                        SearchQuery(self.ns, NEIGHBOURS, filters, vector=vector)
                    )
                    for hit in near:
                        if hit.id != row.id and (hit.vector_similarity or 0.0) >= threshold:
                            link(row.id, hit.id)
                after = page[-1].id
        groups: dict[int, list[int]] = {}
        for member in list(parent):
            groups.setdefault(find(member), []).append(member)
        members = [ids for ids in groups.values() if len(ids) > 1]
        rows = await self.duplicates.members([i for ids in members for i in ids])
        found = []
        for ids in members:
            ranked = sorted(
                (rows[i] for i in ids),
                key=lambda r: (-r.importance, -r.access_count, r.created_at, r.id),
            )
            found.append(Cluster(ranked[0].type, ranked[0].key, [r.key for r in ranked[1:]]))
        return sorted(found, key=lambda c: rows_key(rows, c.survivor))

    async def merge(self, robot_name: str, cluster: Cluster) -> None:
        """Step 1 (committed), then step 2 for each other member (each committed)."""
        s = self.service
        robot = await s.robots.ensure(robot_name)
        survivor = await s.repo.get(self.ns, cluster.survivor, for_update=True)
        others = [await s.repo.get(self.ns, k) for k in cluster.merged]
        live = [o for o in others if o is not None and o.deleted_at is None]
        if survivor is None or survivor.deleted_at is not None or not live:
            await self.session.rollback()
            return
        fields = fields_of(
            survivor,
            importance=max([survivor.importance] + [o.importance for o in live]),
            tags=union(list(survivor.tags), [t for o in live for t in o.tags]),
        )
        rewrite = await s.writes.rewrite(
            robot,
            survivor,
            fields,
            tokens=survivor.token_count,
            vector=None,
            model=None,
            detail={"merged": [o.key for o in live]},
        )
        await self.duplicates.accessed(
            survivor.id,
            sum(o.access_count for o in live),
            max((o.last_accessed_at for o in live if o.last_accessed_at), default=None),
        )
        await s.two_tier.commit_durable()
        await s.writes.place(robot, [], place=False, rewrites=[rewrite])
        for other in live:
            await self.duplicates.alias(other.id, survivor.id)
            await s.forget(robot_name, other.key, False, None)  # commits


def rows_key(rows: dict[int, Any], key: str) -> int:
    return next(r.id for r in rows.values() if r.key == key)
