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
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Literal

from app.config import Settings
from app.db.session import DbSession
from app.db.sql import sql
from app.memories.repository import READ

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


class DuplicateRepository:
    def __init__(self, session: DbSession) -> None:
        self.session = session

    async def lock(self, keys: set[int]) -> None:
        """Held until the transaction ends; taken in one order, so adds never deadlock."""
        if keys:
            await self.session.execute(
                sql("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) k"),
                {"keys": sorted(keys)},
            )

    async def exact(self, namespace_id: int, type_: str, content: str) -> Any | None:
        """The oldest live memory of this type with this content (memory_content_md5)."""
        return (
            await self.session.execute(
                sql("""
                SELECT m.key FROM memory m
                JOIN memory_key k ON k.memory_id = m.id
                WHERE m.namespace_id = :ns AND m.type = :type AND m.deleted_at IS NULL
                  AND md5(m.content) = md5(CAST(:content AS text)) AND m.content = :content
                ORDER BY m.created_at, m.id LIMIT 1"""),
                {"ns": namespace_id, "type": type_, "content": content},
            )
        ).one_or_none()

    async def survivor(self, memory_id: int) -> Any | None:
        """The live memory a merged memory's key resolves to (`htm dedupe`), if any."""
        return (
            await self.session.execute(
                sql(f"""
                SELECT {READ}
                FROM memory_alias a
                JOIN memory_key k ON k.memory_id = a.survivor_id
                JOIN memory m ON m.id = k.memory_id AND m.created_at = k.memory_created_at
                JOIN robot r ON r.id = m.author_robot_id
                WHERE a.memory_id = :id AND m.deleted_at IS NULL"""),
                {"id": memory_id},
            )
        ).one_or_none()

    async def accessed(self, id_: int, created_at: Any, times: int, at: Any) -> Any:
        """Count `times` accesses at `at`; returns (access_count, last_accessed_at)."""
        return (
            await self.session.execute(
                sql("""
                UPDATE memory SET access_count = access_count + :n,
                                  last_accessed_at = greatest(last_accessed_at, :at)
                WHERE id = :id AND created_at = :c
                RETURNING access_count, last_accessed_at"""),
                {"id": id_, "c": created_at, "n": times, "at": at},
            )
        ).one()
