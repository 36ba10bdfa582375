"""The values memories' service and repository exchange: drafts to add, what was stored,
how a replace treats the vector, listing filters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.entities.extract import Entity, extract
from app.visibility import NAMESPACE, Audience, Reader

if TYPE_CHECKING:
    from app.timeframes.validity import Validity


@dataclass
class MemoryDraft:
    """A memory to add, before the database numbers it."""

    key: str
    created_at: datetime | None  # None: the transaction's now()
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    token_count: int
    embedding: list[float] | None
    embedding_model: str | None
    search_text: str | None = None  # None: its content (app/memories/search_text.py)
    valid_from: datetime | None = None  # None: from its created_at
    valid_to: datetime | None = None  # None: open-ended
    audience: Audience = NAMESPACE  # who may read it (app/visibility.py)
    confidence: float | None = None  # None: not said
    source: str | None = None

    def entities(self) -> list[Entity]:
        """What it names (app/entities/extract.py), as the add stores them."""
        return extract(self.content, self.metadata)


@dataclass
class NewMemory:
    id: int
    created_at: datetime
    key: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    author_robot_id: int
    token_count: int
    embedding: list[float] | None
    embedding_model: str | None
    search_text: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    audience: Audience = NAMESPACE
    confidence: float | None = None
    source: str | None = None

    def entities(self) -> list[Entity]:
        """What it names (app/entities/extract.py), as a PUT stores them."""
        return extract(self.content, self.metadata)

    @classmethod
    def from_draft(
        cls, d: MemoryDraft, id: int, created_at: datetime, *, author_robot_id: int
    ) -> NewMemory:
        return cls(
            id=id,
            created_at=created_at,
            key=d.key,
            content=d.content,
            type=d.type,
            importance=d.importance,
            tags=d.tags,
            metadata=d.metadata,
            author_robot_id=author_robot_id,
            token_count=d.token_count,
            embedding=d.embedding,
            embedding_model=d.embedding_model,
            search_text=d.search_text,
            valid_from=d.valid_from,
            valid_to=d.valid_to,
            audience=d.audience,
            confidence=d.confidence,
            source=d.source,
        )


@dataclass(frozen=True)
class VectorChange:
    """What a replace does to the embedding: keep the stored one (same content, no client
    vector), or set this one (None: pending, for the worker)."""

    keep: bool
    embedding: list[float] | None = None
    model: str | None = None


@dataclass(frozen=True)
class ListFilters:
    author_robot_id: int | None = None
    type: str | None = None
    tags_any: list[str] | None = None
    min_importance: float | None = None
    min_confidence: float | None = None  # a memory without one is left out
    sources: list[str] | None = None  # any of these
    start: datetime | None = None
    end: datetime | None = None
    include_deleted: bool = False
    valid: Validity | None = None  # None: every memory, whatever its validity
    as_of: datetime | None = None  # transaction time: the versions current then
    reader: Reader | None = None  # only what this robot may read (None: the operator)
    pool: str | None = None  # only this pool's memories
    # only those naming one of these entity keys (an entity and its aliases: app/entities)
    entity_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AddGroup:
    """One add's drafts (all or nothing), by one robot in one namespace."""

    namespace_id: int
    robot_id: int
    drafts: list[MemoryDraft]
    event_at: datetime | None  # the service clock's instant for the `add` events


@dataclass
class GroupStored:
    """What storing one group did: {key: (id, created_at)} for a group stored whole, or the
    keys that were taken (and nothing stored); `now` is the transaction's now()."""

    claimed: dict[str, tuple[int, datetime]]
    taken: list[str]
    now: datetime | None
