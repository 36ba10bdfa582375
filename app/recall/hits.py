"""Recall's rows as SearchHit: what each search returns, scored by its strategy (`hits_of`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.recall.fusion import SIGNAL_NAMES
from app.recall.planner import SearchPlan
from app.visibility import NAMESPACE, Audience


@dataclass(frozen=True)
class Shares:
    """What a hybrid hit's score is made of (planner.Fusion, planner.Signals)."""

    vector: float  # the vector list's share of the fused score
    fulltext: float  # the full-text list's share
    fused: float
    scaled: float | None  # fused / the best candidate's fused, when signals blend in
    signals: dict[str, float]  # each weighted signal's value in [0, 1]
    # Each list's raw score as the fusion used it (score fusion: for a memory the list did
    # not reach, what the list would have given it; rrf: None off the list)
    vector_raw: float | None = None
    fulltext_raw: float | None = None


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
    shares: Shares | None = None
    # Cosine similarity to the question's vector (None: no vector, or the memory has none
    # yet): what min_score compares.
    relevance: float | None = None
    audience: Audience = NAMESPACE  # who may read it: whether a group's working memory may hold it
    confidence: float | None = None  # as written (migration 0027); None: not said
    source: str | None = None
    # What feedback taught: [scale, shift, uses, misses, pins, nearby forgets]
    # (app/db/sql.FEEDBACK); None: nothing
    feedback: tuple[float, ...] | None = None
    learned_importance: float | None = None  # app/memories/learning.py; None: not read


def hit(
    row: Any,
    *,
    score: float,
    vector_rank: int | None = None,
    vector_similarity: float | None = None,
    fulltext_rank: int | None = None,
    fulltext_score: float | None = None,
    shares: Shares | None = None,
    relevance: float | None = None,
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
        shares=shares,
        relevance=relevance,
        confidence=row["confidence"],
        source=row["source"],
        feedback=tuple(row["feedback"]) if row.get("feedback") else None,
        learned_importance=row.get("learned_importance"),
        audience=Audience(row["visibility"], group_id=row["group_id"], pool_id=row["pool_id"])
        if row.get("visibility", "namespace") != "namespace"
        else NAMESPACE,
    )


def similarity(distance: float) -> float:
    """1 - cosine distance. A zero-length stored vector (a provider can return one) has a NaN
    distance to everything; it counts as unrelated, 0.0 (PostgreSQL sorts NaN last, so it
    also ranks last), since NaN is not a JSON number."""
    return 0.0 if math.isnan(distance) else 1.0 - distance


def hybrid_hit(row: Any, signal_names: tuple[str, ...]) -> SearchHit:
    """A hit of the hybrid statement (statements.hybrid_search), with its shares."""
    signals = {name: row[f"sig_{name}"] for name in signal_names}
    return hit(
        row,
        score=row["score"],
        vector_rank=row["vector_rank"],
        vector_similarity=None if row["distance"] is None else similarity(row["distance"]),
        fulltext_rank=row["text_rank"],
        fulltext_score=row["text_score"],
        shares=Shares(
            row["vec_part"],
            row["text_part"],
            row["fused"],
            row["scaled"] if signal_names else None,
            {k: float(v) for k, v in signals.items() if v is not None},
            row["vec_all"],
            row["text_all"],
        ),
        relevance=None if row["any_distance"] is None else similarity(row["any_distance"]),
    )


def vector_hit(row: Any) -> SearchHit:
    """A hit of a vector-only search: scored by similarity (1 - cosine distance)."""
    sim = similarity(row["distance"])
    return hit(row, score=sim, vector_rank=row["vector_rank"], vector_similarity=sim, relevance=sim)


def text_hit(row: Any) -> SearchHit:
    """A hit of a full-text search: scored by its ranker."""
    score = row["text_score"]
    return hit(row, score=score, fulltext_rank=row["text_rank"], fulltext_score=score)


def hits_of(plan: SearchPlan, rows: list[Any]) -> list[SearchHit]:
    """A plan's rows as hits, scored by its strategy."""
    if plan.strategy == "vector":
        # The counting pass answers one row of no hit when there is none.
        return [vector_hit(r) for r in rows if r["id"] is not None]
    if plan.strategy == "fulltext":
        return [text_hit(r) for r in rows]
    names = SIGNAL_NAMES if plan.query.signals.active else ()
    return [hybrid_hit(r, names) for r in rows]
