"""Near-duplicates on add (issue 18): the rule a request asks for, what counts as a duplicate,
and how the memory it duplicates is reinforced.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from app.config import Settings
from app.recall.query import SearchFilters, SearchQuery
from app.recall.repository import SearchRepository
from app.timeframes.validity import Validity
from app.visibility import Reader

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
    search: SearchRepository, namespace_id: int, clock: Callable[[], datetime]
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
