"""Facts that change: an add that supersedes current memories (`supersedes`), and the
detector that finds what an add may supersede.

A supersede ends the old memory's validity at the new one's `valid_from` (its `created_at`
unless set) and links it (`superseded_by`), as a new version of the old memory, in the add's
own transaction: one durable commit, then every robot holding the old memory lets it go and
the new one is placed (the write protocol, as for a replace).

The detector's rules, in order (each finds current, live memories other than the add's):
`subject_attribute`, the same metadata `subject` and `attribute` (strings); `key_family`,
for a key with an `@`, the keys of its family, the part before its last `@`: that key and
those starting with it and `@` (`user-city@2026-03` supersedes `user-city` and
`user-city@2025-01`); `statement`, the same subject and attribute read from the texts
(app/claims.py: "Carla's favourite colour is purple now" after "...is green"; "we moved the
standup to 10:30" after "the standup is at 9:30") with another value, among the memories
older than the add found by a full-text lookup of the attribute's words
(SupersedeRepository.same_statement); `semantic`, only when the deterministic rules found
nothing and HTM_SUPERSEDE_THRESHOLD is set: the nearest memory of the same type at least
that similar, and, with an LLM configured, only if it says the two contradict. What it finds
is applied when the add (`supersede: apply`) or the deployment (HTM_SUPERSEDE) says so,
except a semantic finding no LLM confirmed, which is only ever proposed. A `statement`
finding is also applied under the deployment's default `propose`, for an add that says
neither `supersede` nor `valid_from`, when HTM_SUPERSEDE_STATEMENTS is `apply` (its
default): the rule's precision, measured end to end on the committed sets of changes and of
distinct facts about the same subject (evals/changed_facts.py), is 1.0, above the 0.98 that
automatic supersedes ask for (tests/memories/test_changed_facts.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, Protocol

from app.claims import changes, me_of, parse
from app.config import Settings
from app.db.session import DbSession
from app.errors import Conflict, NotFound, Unprocessable
from app.llm.base import ChatModel, LlmError, reply_json
from app.memories.audiences import Audiences
from app.memories.dedupe import NearestOfType, nearest_of_type
from app.memories.model import MemoryDraft
from app.memories.schemas import MemoryAdded, MemoryCreate, SupersedeProposal
from app.memories.supersede_repository import SupersedeRepository
from app.memories.writes import Committed, MemoryWrites, key_taken, placement_of
from app.recall.caches import SearchCaches
from app.recall.search import Search
from app.robots.service import Robot
from app.visibility import NAMESPACE, Audience, Reader, covers
from app.working_memory.model import Holder
from app.working_memory.protocol import WriteProtocol
from app.working_memory.schemas import WorkingMemoryOutcome

log = logging.getLogger(__name__)


def family_of(key: str) -> str | None:
    """A key's family: the part before its last `@`, when it has one."""
    family, at, _ = key.rpartition("@")
    return family if at and family else None


def contradiction_prompt(old: str, new: str) -> list[dict[str, str]]:
    return [
        {
            "role": "system",
            "content": "You compare two statements from an agent's memory. Answer with a "
            'JSON object {"contradicts": true} when the second replaces the first (the same '
            "fact, changed: they cannot both be true now), else "
            '{"contradicts": false}.',
        },
        {"role": "user", "content": json.dumps({"first": old, "second": new})},
    ]


@dataclass
class Detector:
    namespace_id: int
    repo: SupersedeRepository
    nearest: NearestOfType
    threshold: float | None
    llm: ChatModel | None
    now: datetime

    @staticmethod
    def of(
        session: DbSession,
        namespace_id: int,
        settings: Settings,
        *,
        caches: SearchCaches,
        llm: ChatModel | None,
    ) -> Callable[[datetime], Detector]:
        """The deployment's detector for a request's instant."""
        search = Search(session, settings.hnsw_ef_search, caches)
        repo = SupersedeRepository(session)
        return lambda now: Detector(
            namespace_id,
            repo,
            nearest_of_type(search, namespace_id, lambda: now),
            settings.supersede_threshold,
            llm,
            now,
        )

    async def find(
        self, draft: MemoryDraft, author: str = ""
    ) -> list[tuple[SupersedeProposal, bool]]:
        """What `draft` (written by robot `author`) may supersede, each with whether it may
        be applied (a semantic finding only when an LLM confirmed it)."""
        ns = self.namespace_id
        if draft.audience != NAMESPACE:  # findings are among namespace-wide memories only
            return []
        found: dict[str, tuple[SupersedeProposal, bool]] = {}
        family = family_of(draft.key)
        subject, attribute = draft.metadata.get("subject"), draft.metadata.get("attribute")
        if isinstance(subject, str) and isinstance(attribute, str) and subject and attribute:
            for r in await self.repo.same_subject(ns, subject, attribute):
                p = SupersedeProposal(key=r.key, content=r.content, rule="subject_attribute")
                found.setdefault(r.key, (p, True))
        if family is not None:
            for r in await self.repo.same_family(ns, family):
                p = SupersedeProposal(key=r.key, content=r.content, rule="key_family")
                found.setdefault(r.key, (p, True))
        for r in await self._same_statement(draft, author):
            p = SupersedeProposal(key=r.key, content=r.content, rule="statement")
            found.setdefault(r.key, (p, True))
        found.pop(draft.key, None)
        if found or self.threshold is None or draft.embedding is None:
            return list(found.values())
        hit = await self.nearest(draft.type, draft.embedding)
        if hit is None or hit.similarity < self.threshold:
            return []
        confirmed = False
        if self.llm is not None:
            confirmed = await self._contradicts(hit.content, draft.content)
            if not confirmed:
                return []
        similarity = round(hit.similarity, 6)
        p = SupersedeProposal(
            key=hit.key, content=hit.content, rule="semantic", similarity=similarity
        )
        return [(p, confirmed)]

    async def _same_statement(self, draft: MemoryDraft, author: str) -> list[Any]:
        """The `statement` rule: current memories valid before the draft that state another
        value of its subject and attribute. A draft with an end of its own supersedes
        nothing by this rule."""
        fact = parse(draft.content, me_of(draft.metadata, author))
        if fact is None or draft.valid_to is not None:
            return []
        start = draft.valid_from or draft.created_at
        rows = await self.repo.same_statement(self.namespace_id, fact.terms, start)
        return [r for r in rows if changes(parse(r.content, me_of(r.metadata, r.author)), fact)]

    async def _contradicts(self, old: str, new: str) -> bool:
        """The LLM's verdict; a failure or an unusable reply is "no" (nothing proposed)."""
        assert self.llm is not None
        try:
            reply = reply_json(await self.llm.complete(contradiction_prompt(old, new), json=True))
        except LlmError as exc:
            log.warning("supersede: the LLM could not judge a contradiction: %s", exc)
            return False
        return isinstance(reply, dict) and reply.get("contradicts") is True


@dataclass
class SupersedingAdds:
    """An add naming memories it supersedes (`supersedes`, per draft): one transaction, the
    request's, under the superseded rows' locks; it commits durably before answering.
    `asked`: the keys the add named itself; the others are the detector's findings, which a
    concurrent change may have ended or forgotten since they were found: those are let go
    (the add did not ask for them), never a 404 or 409."""

    namespace_id: int
    writes: MemoryWrites
    two_tier: WriteProtocol
    audiences: Audiences
    supersedes: list[list[str]]
    asked: frozenset[str] = frozenset()

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Committed:
        rows, supersedes = await self._lock(robot, drafts)
        # A memory added without a time starts now, after what it supersedes: the clock read
        # once the rows are locked, not the transaction's start (now()), which an add of a
        # superseded key committed meanwhile may follow.
        at = await SupersedeRepository(self.writes.session).clock()
        drafts = [d if d.created_at is not None else replace(d, created_at=at) for d in drafts]
        new, taken = await self.writes.store(robot, drafts)
        if taken:
            raise key_taken(taken)
        closed: list[tuple[int, str, list[Holder]]] = []
        for (m, _), ks in zip(new, supersedes, strict=True):
            end = m.valid_from or m.created_at
            for k in ks:
                if end <= rows[k].valid_from:
                    raise _bad(
                        f"{m.key!r} becomes valid at {end.isoformat()}, not after {k!r} did "
                        f"({rows[k].valid_from.isoformat()})"
                    )
                closed.append((rows[k].id, k, await self.writes.supersede(robot, rows[k], m, end)))
        await self.two_tier.commit_durable()

        def answer(outcomes: dict[str, WorkingMemoryOutcome]) -> list[MemoryAdded]:
            return [
                self.writes.added(robot, m, now, outcomes[m.key]).model_copy(
                    update={"superseded": ks}
                )
                for (m, now), ks in zip(new, supersedes, strict=True)
            ]

        return Committed([placement_of(m) for m, _ in new], answer, withdrawn=closed)

    async def _lock(
        self, robot: Robot, drafts: list[MemoryDraft]
    ) -> tuple[dict[str, Any], list[list[str]]]:
        """The superseded rows, locked in key order, and per draft the keys it supersedes
        (`supersedes` less the detector's findings ended or forgotten since); 422, 404, 403
        or 409 (nothing written) when one cannot be superseded by this add."""
        keys = [k for ks in self.supersedes for k in ks]
        own = {d.key for d in drafts}
        if set(keys) & own:
            raise _bad(f"a memory cannot supersede one of its own batch: {sorted(set(keys) & own)}")
        if len(set(keys)) < len(keys):
            raise _bad("a key is superseded twice in this request")
        repo = SupersedeRepository(self.writes.session)
        reader = Reader(self.namespace_id, robot.name)
        rows = await repo.lock_keys(self.namespace_id, keys, reader)
        gone = {
            k
            for k in keys
            if k not in self.asked
            and (k not in rows or rows[k].deleted_at is not None or rows[k].valid_to is not None)
        }
        # Found by the detector, ended or forgotten since: not this add's to end.
        supersedes = [[k for k in ks if k not in gone] for ks in self.supersedes]
        keys = [k for k in keys if k not in gone]
        missing = sorted(k for k in keys if k not in rows or rows[k].deleted_at is not None)
        if missing:
            raise NotFound(f"memories to supersede do not exist: {', '.join(missing)}")
        for k in keys:  # 403 for what the robot may read but not change
            await self.audiences.may_change(robot, rows[k])
        ended = sorted(k for k in keys if rows[k].valid_to is not None)
        if ended:
            raise Conflict(f"already superseded or no longer valid: {', '.join(ended)}", keys=ended)
        for d, ks in zip(drafts, supersedes, strict=True):
            old = [(k, Audience.of(rows[k]), rows[k].author) for k in ks]
            check_covers(d.key, d.audience, robot.name, old)
        return rows, supersedes


def check_covers(
    key: str, audience: Audience, author: str, superseded: Sequence[tuple[str, Audience, str]]
) -> None:
    """409 naming the memories of `superseded` (key, audience, author) that some robot may
    read and could not read their successor `key` (written for `audience` by `author`):
    superseding them would end a fact for that robot with nothing it may read in its place
    (app/visibility.covers)."""
    refused = sorted(k for k, old, by in superseded if not covers(audience, author, old, by))
    if refused:
        raise Conflict(
            f"{key!r} cannot supersede {', '.join(map(repr, refused))}: a robot that reads "
            f"{'it' if len(refused) == 1 else 'them'} could not read {key!r} (a successor is "
            "read by everyone its predecessor is)",
            keys=refused,
        )


def _bad(message: str) -> Unprocessable:
    return Unprocessable(message, errors=[{"field": "supersedes", "message": message}])


class Finds(Protocol):
    """What a draft may supersede (Detector)."""

    async def find(
        self, draft: MemoryDraft, author: str = ""
    ) -> list[tuple[SupersedeProposal, bool]]: ...


async def supersessions(
    bodies: list[MemoryCreate],
    drafts: list[MemoryDraft],
    detector: Finds,
    default: Literal["off", "propose", "apply"],
    *,
    author: str,
    statements: Literal["propose", "apply"] = "propose",
) -> tuple[list[list[str]], list[list[SupersedeProposal]]]:
    """Per draft: the keys it supersedes (its `supersedes`, and the detector's findings when
    it applies them) and the findings only proposed. A `statement` finding is applied under
    the deployment's `propose` too when `statements` says so (HTM_SUPERSEDE_STATEMENTS), the
    add did not choose and gave no `valid_from`. A finding that another memory of the batch
    already supersedes is only proposed (a key is superseded once)."""
    supersedes = [list(b.supersedes) for b in bodies]
    proposals: list[list[SupersedeProposal]] = [[] for _ in bodies]
    taken = {k for ks in supersedes for k in ks}
    for i, (b, d) in enumerate(zip(bodies, drafts, strict=True)):
        mode = b.supersede or default
        if mode == "off":
            continue
        # Automatic only for a statement of now: an add giving its own validity manages it.
        automatic = (
            b.supersede is None
            and mode == "propose"
            and statements == "apply"
            and d.valid_from is None
        )
        for p, applicable in await detector.find(d, author):
            if p.key in supersedes[i]:
                continue
            applied = (mode == "apply" and applicable) or (automatic and p.rule == "statement")
            if applied and p.key not in taken:
                supersedes[i].append(p.key)
                taken.add(p.key)
            else:
                proposals[i].append(p)
    return supersedes, proposals


def proposing(
    added: list[MemoryAdded], proposals: list[list[SupersedeProposal]]
) -> list[MemoryAdded]:
    """The answers, each with the detector's proposals for it."""
    return [
        a.model_copy(update={"supersede_proposals": p}) if p else a
        for a, p in zip(added, proposals, strict=True)
    ]
