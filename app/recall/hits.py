"""Recall's rows as SearchHit: what each search returns, scored by its strategy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class SearchHit:
    id: int
    created_at: datetime
    version: int
    key: str
    content: str
    type: str
    importance: float
    tags: list[str]
    metadata: dict[str, Any]
    author: str  # robot.name
    token_count: int
    score: float
    vector_rank: int | None
    vector_similarity: float | None  # 1 - cosine distance
    fulltext_rank: int | None
    fulltext_score: float | None


def hit(
    row: Any,
    *,
    score: float,
    vector_rank: int | None = None,
    vector_similarity: float | None = None,
    fulltext_rank: int | None = None,
    fulltext_score: float | None = None,
) -> SearchHit:
    return SearchHit(
        id=row["id"],
        created_at=row["created_at"],
        version=row["version"],
        key=row["key"],
        content=row["content"],
        type=row["type"],
        importance=row["importance"],
        tags=list(row["tags"]),
        metadata=row["metadata"],
        author=row["author"],
        token_count=row["token_count"],
        score=float(score),
        vector_rank=vector_rank,
        vector_similarity=vector_similarity,
        fulltext_rank=fulltext_rank,
        fulltext_score=fulltext_score,
    )


def similarity(distance: float) -> float:
    """1 - cosine distance. A zero-length stored vector (a provider can return one) has a NaN
    distance to everything; it counts as unrelated, 0.0 (PostgreSQL sorts NaN last, so it
    also ranks last), since NaN is not a JSON number."""
    return 0.0 if math.isnan(distance) else 1.0 - distance


def vector_hit(row: Any) -> SearchHit:
    """A hit of a vector-only search: scored by similarity (1 - cosine distance)."""
    sim = similarity(row["distance"])
    return hit(row, score=sim, vector_rank=row["vector_rank"], vector_similarity=sim)
