"""How a change to long-term memory is written: new memories stored in the open transaction
(or, as a group, by the group commit: app/memories/adds.py), an existing one rewritten (its
previous version kept, holders marked) or ended (`supersede`), then, after the commit that
its caller owns, acknowledged: working memory, then the answer. MemoryService (service.py)
and the add's strategies decide what to write; this is the one way it is written. Nothing
here commits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import EllipsisType
from typing import Any, NamedTuple, Protocol

from app.auth.caller import Caller
from app.clock import Clock
from app.config import VectorStorage
from app.db.session import DbSession
from app.db.vectors import StoredVectors
from app.errors import Conflict
from app.events.repository import EventRepository
from app.memories.adds import GroupCommit
from app.memories.model import AddGroup, GroupStored, MemoryDraft, NewMemory, VectorChange
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryAdded, MemoryFields, feedback_fields
from app.memories.search_text import same_vector_input
from app.memories.supersede_repository import SupersedeRepository
from app.memories.version_repository import VersionRepository
from app.robots.service import Robot
from app.visibility import Audience
from app.working_memory.model import Holder, Placement
from app.working_memory.protocol import WriteProtocol
from app.working_memory.schemas import WorkingMemoryOutcome


class MemoryWrites:
    def __init__(
        self,
        session: DbSession,
        caller: Caller,
        two_tier: WriteProtocol,
        clock: Clock,
        adds: GroupCommit,
        vectors: StoredVectors,
    ) -> None:
        self.session = session
        self.caller = caller
        self.two_tier = two_tier
        self.clock = clock
        self.adds = adds
        self.vectors = vectors
        self.repo = MemoryRepository(session)
        self.history = VersionRepository(session)
        self.events = EventRepository(session, clock)

    async def _storage(self) -> VectorStorage:
        return await self.vectors.storage(self.session)

    def group(self, robot: Robot, drafts: list[MemoryDraft]) -> AddGroup:
        """The drafts as one add's group of rows (the group commit's unit)."""
        return AddGroup(self.caller.namespace_id, robot.id, drafts, self.clock())

    async def store(
        self, robot: Robot, drafts: list[MemoryDraft]
    ) -> tuple[list[Stored], list[str]]:
        """Claim the drafts' keys and store them in the open transaction. Returns what was
        stored, or (when any key is taken) nothing and the taken keys."""
        group = self.group(robot, drafts)
        [result] = await self.repo.add(
            [group],
            await self._storage(),
            self.adds.enrich,
            apart=await self.adds.apart(self.session),
        )
        return stored(robot, drafts, result)

    def written(self, robot: Robot, new: list[Stored]) -> Committed:
        """New memories, to acknowledge: each placed and answered as it was written."""

        def answer(outcomes: dict[str, WorkingMemoryOutcome]) -> list[MemoryAdded]:
            return [self.added(robot, m, now, outcomes[m.key]) for m, now in new]

        return Committed([placement_of(m) for m, _ in new], answer)

    async def acknowledge(
        self, robot: Robot, written: Committed, place: bool = True
    ) -> list[MemoryAdded]:
        """After the write's durable commit (invariant 1): the memories it ended leave their
        holders, the rewritten ones' old copies leave the other robots holding them, then the
        placements enter the robot's working memory (unless `place` is off); the answers show
        what was written, so nothing is read back (and nothing can fail after the commit)."""
        for memory_id, key, holders in written.withdrawn:
            await self.two_tier.withdraw(holders, memory_id, key)
        return written.answer(await self.place(robot, written.placements, place, written.rewrites))

    async def place(
        self,
        robot: Robot,
        placements: list[Placement],
        place: bool = True,
        rewrites: list[Rewrite] | None = None,
    ) -> dict[str, WorkingMemoryOutcome]:
        """After the durable commit: the rewritten memories' old copies leave the other
        robots holding them, then the placements enter the robot's working memory (with
        `place` off, none does)."""
        for rw in rewrites or []:
            # The writer's own copy is replaced by its placement, not withdrawn.
            await self.two_tier.withdraw(
                [h for h in rw.holders if h.robot_id != robot.id], rw.row.id, rw.row.key
            )
        if place:
            return await self.two_tier.place(robot, placements)
        unplaced = WorkingMemoryOutcome(admitted=False, reason="not_placed")
        return {p.key: unplaced for p in placements}

    def added(
        self, robot: Robot, m: NewMemory, now: datetime, outcome: WorkingMemoryOutcome
    ) -> MemoryAdded:
        return MemoryAdded(
            **shown(m),
            id=m.id,
            author=robot.name,
            embedding_status="ready" if m.embedding is not None else "pending",
            embedding_model=m.embedding_model,
            created_at=m.created_at,
            updated_at=now,  # the insert's now(): same transaction as the claim
            deleted_at=None,
            version=1,
            created=True,
            working_memory=outcome,
            valid_from=m.valid_from or m.created_at,
            valid_to=m.valid_to,
        )

    async def rewrite(
        self,
        robot: Robot,
        row: Any,
        body: MemoryFields,
        *,
        tokens: int,
        vector: list[float] | None,
        model: str | None,
        detail: dict[str, Any] | None = None,
        search_text: str | EllipsisType | None = ...,
        audience: Audience | None = None,
    ) -> Rewrite:
        """A replace's part in the open transaction: the previous version kept, the row
        rewritten (nothing when no field changes), its holders marked. `detail`: the `add`
        event's; `search_text`: the new one (app/memories/search_text.py; `...`: the row's)."""
        text = row.search_text if isinstance(search_text, EllipsisType) else search_text
        same_content = row.content == body.content
        same_text = same_vector_input(
            (row.content, row.metadata, row.search_text), (body.content, body.metadata, text)
        )
        if body.embedding is not None:
            change = VectorChange(keep=False, embedding=body.embedding, model="client")
        elif same_text:
            change = VectorChange(keep=True)
        else:  # vector was embedded for the searched text (or is None: pending, the worker's)
            change = VectorChange(keep=False, embedding=vector, model=model)
        m = NewMemory(
            id=row.id,
            created_at=body.created_at or row.created_at,
            key=row.key,
            content=body.content,
            type=body.type,
            importance=body.importance,
            tags=body.tags,
            metadata=body.metadata,
            author_robot_id=row.author_robot_id,
            token_count=tokens,
            embedding=None,
            embedding_model=None,
            search_text=text,
            valid_from=body.valid_from,
            valid_to=body.valid_to,
            audience=audience or Audience.of(row),  # None: the row's own
            confidence=body.confidence,
            source=body.source,
        )
        same_audience = m.audience == Audience.of(row)
        unchanged = (
            row.deleted_at is None
            and same_content
            and change.keep
            and text == row.search_text
            and (m.created_at, m.type, m.importance, m.tags, m.metadata)
            == (row.created_at, row.type, row.importance, list(row.tags), row.metadata)
            and (m.confidence, m.source) == (row.confidence, row.source)
            and (m.valid_from or m.created_at, m.valid_to) == (row.valid_from, row.valid_to)
            and same_audience
        )
        holders = []
        if unchanged:  # a repeated PUT: nothing to write
            version, written = row.version, row
        else:
            version = row.version + 1
            await self.history.keep(row.id, row.created_at)  # the version being replaced
            written = await self.repo.replace(
                row, m, version, vector=change, storage=await self._storage(), by=robot.id
            )
            if m.created_at != row.created_at:
                await self.two_tier.moved(row.id, m.created_at)
            if not same_content or m.importance != row.importance or not same_audience:
                holders = await self.two_tier.mark_holders(row.id)
            await self.events.record(
                self.caller.namespace_id,
                "add",
                robot.id,
                memory_ids=[row.id],
                detail=detail or {"upsert": True},
            )
        return Rewrite(row, m, version, written, holders)

    async def supersede(self, robot: Robot, row: Any, by: NewMemory, end: datetime) -> list[Holder]:
        """In the open transaction, on a locked current memory: its validity ends at `end`
        and it links to `by`, as a new version (the previous one kept, so `as_of` reads it
        as still open); its holders are marked, to let it go after the commit."""
        await self.history.keep(row.id, row.created_at)
        await SupersedeRepository(self.session).close(
            row, by.id, end, version=row.version + 1, by=robot.id
        )
        holders = await self.two_tier.mark_holders(row.id)
        await self.events.record(
            self.caller.namespace_id,
            "supersede",
            robot.id,
            memory_ids=[row.id],
            detail={"by": by.key},
        )
        return holders

    def rewritten(self, rw: Rewrite, outcome: WorkingMemoryOutcome) -> MemoryAdded:
        return MemoryAdded(
            **shown(rw.memory),
            id=rw.row.id,
            author=rw.row.author,
            embedding_status=rw.written.embedding_status,
            embedding_model=rw.written.embedding_model,
            created_at=rw.memory.created_at,
            updated_at=rw.written.updated_at,
            deleted_at=None,
            version=rw.version,
            access_count=rw.row.access_count,
            last_accessed_at=rw.row.last_accessed_at,
            # the feedback learned so far, applied to the importance just written
            **feedback_fields(rw.memory.importance, getattr(rw.row, "feedback", None)),
            created=False,
            working_memory=outcome,
            valid_from=rw.memory.valid_from or rw.memory.created_at,
            valid_to=rw.memory.valid_to,
            superseded_by=rw.row.superseded_by if rw.memory.valid_to is not None else None,
        )


_SHOWN = (
    "key",
    "content",
    "type",
    "importance",
    "confidence",
    "source",
    "tags",
    "metadata",
    "token_count",
)


def shown(m: NewMemory) -> dict[str, Any]:
    """The fields a response repeats as they were written."""
    a = m.audience
    return {f: getattr(m, f) for f in _SHOWN} | {
        "visibility": a.visibility,
        "readers": list(a.readers),
        "pool": a.pool,
    }


def placement_of(m: NewMemory) -> Placement:
    return Placement(
        m.id, m.created_at, 1, m.key, m.content, m.token_count, m.importance, m.audience
    )


class Rewrite(NamedTuple):
    """A replace written in the open transaction, for after its commit."""

    row: Any  # the row as it was, locked
    memory: NewMemory  # its new fields
    version: int
    written: Any  # (updated_at, embedding_status, embedding_model)
    holders: list[Holder]

    @property
    def placement(self) -> Placement:
        m = self.memory
        return Placement(
            self.row.id,
            m.created_at,
            self.version,
            self.row.key,
            m.content,
            m.token_count,
            m.importance,
            m.audience,
        )


def stored(
    robot: Robot, drafts: list[MemoryDraft], result: GroupStored
) -> tuple[list[Stored], list[str]]:
    """What a group's statement stored, or (when any key is taken) nothing and the taken
    keys."""
    claimed, now = result.claimed, result.now
    if result.taken or now is None:
        return [], sorted(result.taken)
    return [
        Stored(NewMemory.from_draft(d, *claimed[d.key], author_robot_id=robot.id), now)
        for d in drafts
    ], []


@dataclass
class Committed:
    """What a write committed, for its acknowledgement (MemoryWrites.acknowledge): the
    memories to place, how each memory of the request is answered given their outcomes, the
    rewritten memories (their old copies withdrawn from other holders) and the ended ones
    (memory id, key, holders) to let go."""

    placements: list[Placement]
    answer: Callable[[dict[str, WorkingMemoryOutcome]], list[MemoryAdded]]
    rewrites: list[Rewrite] = field(default_factory=list)
    withdrawn: list[tuple[int, str, list[Holder]]] = field(default_factory=list)


class AddStrategy(Protocol):
    """One transaction shape of an add (app/memories/adding.py): plain, deduplicated or
    superseding."""

    async def write(self, robot: Robot, drafts: list[MemoryDraft]) -> Committed:
        """Store the drafts in the transaction this strategy owns, up to its durable commit;
        what it wrote, for the acknowledgement."""
        ...


class Stored(NamedTuple):
    """A memory stored in the open transaction, and that transaction's now()."""

    memory: NewMemory
    now: datetime


def key_taken(keys: list[str]) -> Conflict:
    return Conflict(
        f"key already exists in this namespace: {', '.join(keys)}; "
        "use PUT /v1/robots/{robot}/memories/{key} to update",
        keys=keys,
    )


def fields_of(row: Any, *, importance: float, tags: list[str]) -> MemoryFields:
    """A stored memory's fields with a new importance and tags (content, vector, time and
    validity kept): what PATCH and a duplicate's reinforcement write."""
    return MemoryFields.model_construct(
        content=row.content,
        type=row.type,
        importance=importance,
        confidence=row.confidence,
        source=row.source,
        tags=tags,
        metadata=row.metadata,
        created_at=None,
        embedding=None,
        valid_from=None if row.valid_from == row.created_at else row.valid_from,
        valid_to=row.valid_to,
    )
