"""An add with a dedupe rule (app/memories/dedupe.py): what MemoryService.add_many does when
any of its memories has one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.clock import Clock
from app.db.session import DbSession
from app.errors import Conflict
from app.memories.dedupe import DedupeRule, lock_keys, same, union
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryAdded, MemoryCreate
from app.memories.writes import MemoryWrites, Rewrite, fields_of, key_taken, placement_of
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from app.robots.service import Robot
from app.timeframes.validity import Validity
from app.visibility import Reader
from app.working_memory.protocol import WriteProtocol


@dataclass
class DuplicateAdds:
    session: DbSession
    namespace_id: int
    writes: MemoryWrites
    two_tier: WriteProtocol
    clock: Clock
    search: Search

    async def add(
        self, robot: Robot, drafts: list[MemoryDraft], rules: list[DedupeRule], place: bool
    ) -> list[MemoryAdded]:
        """An add with a dedupe rule (app/memories/dedupe.py), in the request's transaction
        under the rule's advisory locks: each draft duplicating a stored memory reinforces
        it, each duplicating an earlier draft of the batch joins that draft, the rest are
        stored; one durable commit, then working memory."""
        ns = self.namespace_id
        finder = DuplicateRepository(self.session)
        locks = [lock_keys(ns, d.type, d.content, r) for d, r in zip(drafts, rules, strict=True)]
        await finder.lock(set().union(*locks))
        of_stored: dict[str, list[int]] = {}  # a stored memory's key: the drafts duplicating it
        of_draft: dict[int, int] = {}  # a draft: the earlier draft of the batch it duplicates
        fresh: list[int] = []
        for i, (d, rule) in enumerate(zip(drafts, rules, strict=True)):
            found = await self._stored(finder, d, rule)
            if found is not None:
                of_stored.setdefault(found, []).append(i)
                continue
            j = next(
                (
                    j
                    for j in fresh
                    if drafts[j].type == d.type
                    and same(rule, d.content, d.embedding, drafts[j].content, drafts[j].embedding)
                ),
                None,
            )
            if j is None:
                fresh.append(i)
                continue
            of_draft[i] = j
            drafts[j].importance = max(drafts[j].importance, d.importance)
            drafts[j].tags = union(drafts[j].tags, d.tags)

        new, taken = await self.writes.store(robot, [drafts[i] for i in fresh])
        if taken:
            raise key_taken(taken)
        rewrites: list[tuple[Rewrite, Any]] = []
        for key, sources in of_stored.items():
            row = await MemoryRepository(self.session).get(
                ns, key, for_update=True, viewer=Reader(ns, robot.name)
            )
            if row is None or row.deleted_at is not None:
                raise Conflict(
                    f"memory {key!r}, which this add duplicates, was deleted meanwhile; retry",
                    keys=[key],
                )
            fields = fields_of(
                row,
                importance=max([row.importance] + [drafts[i].importance for i in sources]),
                tags=union(list(row.tags), [t for i in sources for t in drafts[i].tags]),
            )
            rewrite = await self.writes.rewrite(
                robot, row, fields, row.token_count, None, None, {"duplicate": True}
            )
            access = await finder.accessed(row.id, len(sources), self.clock())
            rewrites.append((rewrite, access))
        await self.two_tier.commit_durable()

        outcomes = await self.writes.place(
            robot,
            [placement_of(m) for m, _ in new] + [rw.placement for rw, _ in rewrites],
            place,
            [rw for rw, _ in rewrites],
        )
        added = {m.key: self.writes.added(robot, m, now, outcomes[m.key]) for m, now in new}
        for rw, access in rewrites:
            added[rw.row.key] = self.writes.rewritten(rw, outcomes[rw.row.key]).model_copy(
                update={
                    "access_count": access.access_count,
                    "last_accessed_at": access.last_accessed_at,
                }
            )
        by_draft = {i: key for key, sources in of_stored.items() for i in sources}
        answers: list[MemoryAdded] = []
        for i, d in enumerate(drafts):
            if i in by_draft:
                key = by_draft[i]
            elif i in of_draft:
                key = drafts[of_draft[i]].key
            else:
                answers.append(added[d.key])
                continue
            answers.append(added[key].model_copy(update={"created": False, "duplicate_of": key}))
        return answers

    async def _stored(
        self, finder: DuplicateRepository, d: MemoryDraft, rule: DedupeRule
    ) -> str | None:
        """The key of the live memory `d` duplicates under `rule`, if any."""
        if rule.mode == "off":
            return None
        exact = await finder.exact(self.namespace_id, d.type, d.content)
        if exact is not None:
            return str(exact.key)
        if rule.mode != "semantic" or d.embedding is None:
            return None
        filters = SearchFilters(
            types=[d.type],
            valid=Validity.now(self.clock()),
            reader=Reader(self.namespace_id, "", ()),
        )
        nearest = await self.search.vector(
            SearchQuery(self.namespace_id, 1, filters, vector=d.embedding)
        )
        if nearest and (nearest[0].vector_similarity or 0.0) >= rule.threshold:
            return nearest[0].key
        return None


async def may_duplicate(
    bodies: list[MemoryCreate],
    drafts: list[MemoryDraft],
    rules: list[DedupeRule],
    finder: DuplicateRepository,
    namespace_id: int,
) -> bool:
    """Whether the add takes the dedupe path (locked, in the request's transaction):
    always for a rule the add asks for and for the semantic rule; for the deployment's
    exact rule only when a draft repeats another or a stored memory (one indexed
    statement), so that an add of new content keeps group commit. Two concurrent adds of
    the same new content under the deployment's rule may then both be stored (asked per
    add, `dedupe: exact` locks and never does)."""
    checked = [(b, d) for b, d, r in zip(bodies, drafts, rules, strict=True) if r.mode != "off"]
    if not checked:
        return False
    if any(
        b.dedupe is not None or r.mode == "semantic"
        for b, r in zip(bodies, rules, strict=True)
        if r.mode != "off"
    ):
        return True
    pairs = [(d.type, d.content) for _, d in checked]
    if len(set(pairs)) < len(pairs):
        return True
    return await finder.any_exact(namespace_id, pairs)
