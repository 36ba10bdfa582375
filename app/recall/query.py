"""One search, as one value: what is searched (the question's text, its vector), among which
memories (the namespace and the filters, rendered once as a WHERE clause), how deep, and how
hybrid's lists are fused. RecallService makes it from a request; SearchRepository runs it.

Every statement of a search is scoped to one namespace and skips soft-deleted rows. Filters
are plain predicates on `memory` (alias `m`), so the planner can use the btree indexes and
TimescaleDB can exclude chunks by the `created_at` range.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from app.db.sql import vector_text
from app.recall.fusion import NO_SIGNALS, Fusion, Signals, hybrid_candidates
from app.timeframes.validity import Validity
from app.visibility import Reader


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions on the searched memories; None (or an empty list/dict) means "any"."""

    author_robot_id: int | None = None  # scope=self
    types: list[str] | None = None
    tags_any: list[str] | None = None  # memory.tags && tags_any
    tags_all: list[str] | None = None  # memory.tags @> tags_all
    min_importance: float | None = None
    min_confidence: float | None = None  # memory.confidence >= it (NULL: left out)
    sources: list[str] | None = None  # memory.source = any of them
    metadata: dict[str, Any] | None = None  # memory.metadata @> metadata (jsonb containment)
    start: datetime | None = None  # created_at >= start
    end: datetime | None = None  # created_at <  end
    # Valid time (migration 0017): only the memories true at this instant; None: every one.
    valid: Validity | None = None
    # Who reads (app/visibility.py): only what this robot may; None: the operator, every one.
    reader: Reader | None = None
    # Naming any of these entity keys (memory.entities, migration 0026: an entity and its
    # aliases, app/entities); None: any.
    entity_names: tuple[str, ...] | None = None

    @property
    def unfiltered(self) -> bool:
        """No filter but "current now": nearly every memory is current, so the planner treats
        a search of the current ones as unfiltered."""
        return dataclasses.replace(self, valid=None, reader=None) == NO_FILTERS


NO_FILTERS = SearchFilters()


@dataclass(frozen=True)
class Where:
    """A WHERE clause over `memory m` and its bind values (each named `ns` or `f_*`)."""

    sql: str
    params: dict[str, Any]


def where(namespace_id: int, filters: SearchFilters) -> Where:
    """The WHERE clause shared by every statement of a search."""
    clauses = ["m.namespace_id = :ns", "m.deleted_at IS NULL"]
    params: dict[str, Any] = {"ns": namespace_id}

    def add(clause: str, name: str, value: Any) -> None:
        clauses.append(clause)
        params[name] = value

    if filters.author_robot_id is not None:
        add("m.author_robot_id = :f_author", "f_author", filters.author_robot_id)
    if filters.types:
        add("m.type = ANY(CAST(:f_types AS text[]))", "f_types", list(filters.types))
    # A tag matches itself and its descendants: tag_paths() (migration 0006) lists every
    # tag's ancestors too, and its GIN index memory_tag_paths serves both operators.
    if filters.tags_any:
        add("tag_paths(m.tags) && CAST(:f_tags_any AS text[])", "f_tags_any", [*filters.tags_any])
    if filters.tags_all:
        add("tag_paths(m.tags) @> CAST(:f_tags_all AS text[])", "f_tags_all", [*filters.tags_all])
    if filters.entity_names is not None:  # its GIN index memory_entities
        add("m.entities && CAST(:f_entities AS text[])", "f_entities", [*filters.entity_names])
    if filters.min_importance is not None:
        add("m.importance >= :f_min_importance", "f_min_importance", float(filters.min_importance))
    if filters.min_confidence is not None:
        add("m.confidence >= :f_min_confidence", "f_min_confidence", filters.min_confidence)
    if filters.sources:
        add("m.source = ANY(CAST(:f_sources AS text[]))", "f_sources", list(filters.sources))
    if filters.metadata:
        add("m.metadata @> CAST(:f_metadata AS jsonb)", "f_metadata", json.dumps(filters.metadata))
    # Plain range predicates on the partitioning column: TimescaleDB excludes chunks by them.
    if filters.start is not None:
        add("m.created_at >= :f_start", "f_start", filters.start)
    if filters.end is not None:
        add("m.created_at < :f_end", "f_end", filters.end)
    if filters.valid is not None:
        valid, bound = filters.valid.where()
        clauses.extend(valid)
        params.update(bound)
    if filters.reader is not None:
        readable, bound = filters.reader.where()
        clauses.append(readable)
        params.update(bound)
    return Where(" AND ".join(clauses), params)


@dataclass(frozen=True)
class SearchQuery:
    """A search of one namespace's long-term memory.

    `limit` is how many hits come back (a reranker's deeper page included); `text` is what
    full text searches (and what the vector was made of); `vector` the question's embedding,
    None when there is none (hybrid then runs on full text alone). `fusion`, `signals` and
    `now` shape hybrid's score only."""

    namespace_id: int
    limit: int
    filters: SearchFilters = NO_FILTERS
    text: str = ""
    vector: list[float] | None = None
    fusion: Fusion = field(default_factory=Fusion)
    signals: Signals = NO_SIGNALS
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    @cached_property
    def where(self) -> Where:
        """Rendered once, whatever number of statements the search runs."""
        return where(self.namespace_id, self.filters)

    @cached_property
    def vector_text(self) -> str | None:
        """The vector as the statements bind it (app.db.sql.vector_text), rendered once."""
        return None if self.vector is None else vector_text(self.vector)

    @property
    def candidates(self) -> int:
        """How deep each of hybrid's lists is (fusion.hybrid_candidates)."""
        return hybrid_candidates(self.limit, self.fusion)
