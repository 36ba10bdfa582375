"""Near-duplicates on add (issue 18): the rule a request asks for, what counts as a duplicate,
and how the memory it duplicates is reinforced: `DuplicateAdds`, the add's strategy when a
draft may duplicate (`may_duplicate`; MemoryService.add_many, app/memories/adding.py).

`dedupe: exact` matches a live memory of the same namespace and type with the same content;
`semantic` also matches the nearest one of that type whose cosine similarity to the new
memory's vector reaches the threshold (with no vector yet, only exact matches count).
Within one batch, a memory duplicating an earlier memory of the batch joins it.

A duplicate writes no row: the memory it matched is reinforced (importance the max of both,
tags the union, access count up) and the add answers with it, naming it in `duplicate_of`.

Race-free: a deduplicating add takes transaction-scoped advisory locks before it looks, and
stores in the same transaction, so two concurrent adds of one content never both create.
`exact` locks the (namespace, type, content) triple; `semantic` also locks (namespace, type),
which serialises semantic adds of one type in one namespace (a near-duplicate can be any of
its memories).

The SQL (the locks, the lookups, the reinforcement) is DuplicateRepository's
(app/memories/duplicate_repository.py). The semantic rule and the supersede detector ask one
question of recall's vector search, `nearest_of_type`: the nearest current memory of a type.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from app.clock import Clock
from app.config import Settings
from app.db.session import DbSession
from app.errors import Conflict
from app.memories.duplicate_repository import DuplicateRepository
from app.memories.model import MemoryDraft
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryAdded, MemoryCreate
from app.memories.writes import (
    Committed,
    MemoryWrites,
    Rewrite,
    Stored,
    fields_of,
    key_taken,
    placement_of,
)
from app.recall.query import SearchFilters, SearchQuery
from app.recall.search import Search
from app.robots.service import Robot
from app.timeframes.validity import Validity
from app.visibility import NAMESPACE, Reader
from app.working_memory.protocol import WriteProtocol
from app.working_memory.schemas import WorkingMemoryOutcome

DedupeMode = Literal["off", "exact", "semantic"]


@dataclass(frozen=True)
class DedupeRule:
    mode: DedupeMode
    threshold: float


def rule_for(mode: DedupeMode | None, threshold: float | None, settings: Settings) -> DedupeRule:
    """The request's rule, each part defaulting to the deployment's."""
    return DedupeRule(
        mode or settings.dedupe,
        threshold if threshold is not None else settings.dedupe_threshold,
    )


def _lock_key(*parts: object) -> int:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_keys(namespace_id: int, type_: str, content: str, rule: DedupeRule) -> set[int]:
    if rule.mode == "off":
        return set()
    content_hash = hashlib.md5(content.encode(), usedforsecurity=False).hexdigest()
    keys = {_lock_key("dedupe-exact", namespace_id, type_, content_hash)}
    if rule.mode == "semantic":
        keys.add(_lock_key("dedupe-semantic", namespace_id, type_))
    return keys


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return 0.0 if na == 0 or nb == 0 else dot / (na * nb)


def same(
    rule: DedupeRule,
    content: str,
    vector: list[float] | None,
    *,
    other_content: str,
    other_vector: list[float] | None,
) -> bool:
    """Whether a memory duplicates another of the same type under `rule`."""
    if rule.mode == "off":
        return False
    if content == other_content:
        return True
    if rule.mode == "semantic" and vector is not None and other_vector is not None:
        return cosine(vector, other_vector) >= rule.threshold
    return False


def union(tags: list[str], more: list[str]) -> list[str]:
    """`tags`, then those of `more` not among them, in order."""
    return tags + [t for t in dict.fromkeys(more) if t not in tags]


@dataclass(frozen=True)
class Nearest:
    """The memory nearest to a vector, and its cosine similarity to it."""

    key: str
    content: str
    similarity: float


class NearestOfType(Protocol):
    async def __call__(self, type_: str, vector: list[float]) -> Nearest | None: ...


def nearest_of_type(
    search: Search, namespace_id: int, clock: Callable[[], datetime]
) -> NearestOfType:
    """The one search an add makes (the semantic dedupe rule, the supersede detector): the
    current namespace-wide memory of a type nearest to a vector, by recall's vector search
    (exact or the index, as its planner says)."""

    async def nearest(type_: str, vector: list[float]) -> Nearest | None:
        filters = SearchFilters(
            types=[type_], valid=Validity.now(clock()), reader=Reader(namespace_id, "", ())
        )
        hits = await search.vector(SearchQuery(namespace_id, 1, filters, vector=vector))
        if not hits:
            return None
        return Nearest(hits[0].key, hits[0].content, hits[0].vector_similarity or 0.0)

    return nearest


def rules_for_adds(
    bodies: Sequence[MemoryCreate],
    drafts: Sequence[MemoryDraft],
    conversation: Sequence[bool],
    settings: Settings,
) -> list[DedupeRule]:
    """Each draft's rule: its body's, else the deployment's. A conversation's turns are
    events: the same words said twice are two turns, so the deployment's default rule leaves
    them alone (an add's own `dedupe` still applies). A private, group or pool memory is
    nobody's duplicate: it is stored as asked."""
    off = rule_for("off", None, settings)
    return [
        rule_for("off" if b.dedupe is None and said else b.dedupe, b.dedupe_threshold, settings)
        if d.audience == NAMESPACE
        else off
        for b, d, said in zip(bodies, drafts, conversation, strict=True)
    ]


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

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Committed:
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
            return self._answers(
                robot, drafts, fates, new=new, rewrites=rewrites, outcomes=outcomes
            )

        placements = [placement_of(m) for m, _ in new] + [rw.placement for rw, _ in rewrites]
        return Committed(placements, answer, rewrites=[rw for rw, _ in rewrites])

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
                    and same(
                        rule,
                        d.content,
                        d.embedding,
                        other_content=drafts[j].content,
                        other_vector=drafts[j].embedding,
                    )
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
            robot,
            row,
            fields,
            tokens=row.token_count,
            vector=None,
            model=None,
            detail={"duplicate": True},
        )
        return rewrite, await finder.accessed(row.id, len(sources), self.clock())

    def _answers(
        self,
        robot: Robot,
        drafts: list[MemoryDraft],
        fates: _Sorted,
        *,
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
    *,
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
