"""An add with a dedupe rule (app/memories/dedupe.py): the add's strategy when any of its
memories has one (MemoryService.add_many)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.clock import Clock
from app.db.session import DbSession
from app.errors import Conflict
from app.memories.dedupe import DedupeRule, NearestOfType, lock_keys, same, union
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryAdded, MemoryCreate
from app.memories.writes import (
    MemoryWrites,
    Rewrite,
    Stored,
    Written,
    fields_of,
    key_taken,
    placement_of,
)
from app.robots.service import Robot
from app.visibility import Reader
from app.working_memory.protocol import WriteProtocol
from app.working_memory.schemas import WorkingMemoryOutcome


@dataclass
class _Sorted:
    """Each draft's fate: it duplicates a stored memory (by key), an earlier draft of the
    batch (by index), or nothing (`fresh`: stored)."""

    of_stored: dict[str, list[int]] = field(default_factory=dict)
    of_draft: dict[int, int] = field(default_factory=dict)
    fresh: list[int] = field(default_factory=list)


@dataclass
class DuplicateAdds:
    """In the request's transaction under the rules' advisory locks: each draft duplicating
    a stored memory reinforces it, each duplicating an earlier draft of the batch joins that
    draft, the rest are stored; it commits durably before answering."""

    session: DbSession
    namespace_id: int
    writes: MemoryWrites
    two_tier: WriteProtocol
    clock: Clock
    nearest: NearestOfType
    rules: list[DedupeRule]

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Written:
        finder = DuplicateRepository(self.session)
        locks = [
            lock_keys(self.namespace_id, d.type, d.content, r)
            for d, r in zip(drafts, self.rules, strict=True)
        ]
        await finder.lock(set().union(*locks))
        fates = await self._sort(finder, drafts)
        new, taken = await self.writes.store(robot, [drafts[i] for i in fates.fresh])
        if taken:
            raise key_taken(taken)
        rewrites = [
            await self._reinforce(finder, robot, key, [drafts[i] for i in sources])
            for key, sources in fates.of_stored.items()
        ]
        await self.two_tier.commit_durable()

        def answer(outcomes: dict[str, WorkingMemoryOutcome]) -> list[MemoryAdded]:
            return self._answers(robot, drafts, fates, new, rewrites, outcomes)

        placements = [placement_of(m) for m, _ in new] + [rw.placement for rw, _ in rewrites]
        return Written(placements, answer, rewrites=[rw for rw, _ in rewrites])

    async def _sort(self, finder: DuplicateRepository, drafts: list[MemoryDraft]) -> _Sorted:
        """What each draft duplicates; a draft joining an earlier one lends it its importance
        (the max) and tags (the union)."""
        fates = _Sorted()
        for i, (d, rule) in enumerate(zip(drafts, self.rules, strict=True)):
            found = await self._stored(finder, d, rule)
            if found is not None:
                fates.of_stored.setdefault(found, []).append(i)
                continue
            j = next(
                (
                    j
                    for j in fates.fresh
                    if drafts[j].type == d.type
                    and same(rule, d.content, d.embedding, drafts[j].content, drafts[j].embedding)
                ),
                None,
            )
            if j is None:
                fates.fresh.append(i)
                continue
            fates.of_draft[i] = j
            drafts[j].importance = max(drafts[j].importance, d.importance)
            drafts[j].tags = union(drafts[j].tags, d.tags)
        return fates

    async def _reinforce(
        self, finder: DuplicateRepository, robot: Robot, key: str, sources: list[MemoryDraft]
    ) -> tuple[Rewrite, Any]:
        """The stored memory `key`, locked, rewritten with the max importance and the tag
        union of the drafts duplicating it; its access count raised by theirs."""
        ns = self.namespace_id
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
            importance=max([row.importance] + [d.importance for d in sources]),
            tags=union(list(row.tags), [t for d in sources for t in d.tags]),
        )
        rewrite = await self.writes.rewrite(
            robot, row, fields, row.token_count, None, None, {"duplicate": True}
        )
        return rewrite, await finder.accessed(row.id, len(sources), self.clock())

    def _answers(
        self,
        robot: Robot,
        drafts: list[MemoryDraft],
        fates: _Sorted,
        new: list[Stored],
        rewrites: list[tuple[Rewrite, Any]],
        outcomes: dict[str, WorkingMemoryOutcome],
    ) -> list[MemoryAdded]:
        """Per draft: the memory stored for it, or the one it duplicates (`duplicate_of`)."""
        added = {m.key: self.writes.added(robot, m, now, outcomes[m.key]) for m, now in new}
        for rw, access in rewrites:
            added[rw.row.key] = self.writes.rewritten(rw, outcomes[rw.row.key]).model_copy(
                update={
                    "access_count": access.access_count,
                    "last_accessed_at": access.last_accessed_at,
                }
            )
        by_draft = {i: key for key, sources in fates.of_stored.items() for i in sources}
        answers: list[MemoryAdded] = []
        for i, d in enumerate(drafts):
            if i in by_draft:
                key = by_draft[i]
            elif i in fates.of_draft:
                key = drafts[fates.of_draft[i]].key
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
        nearest = await self.nearest(d.type, d.embedding)
        if nearest is not None and nearest.similarity >= rule.threshold:
            return nearest.key
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
