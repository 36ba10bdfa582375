"""`explain: true`: each hit says how its score was made (each list's rank, raw score and
share, each signal's value and contribution, the reranker's verdict, the newer statement of
its fact it was placed below)."""

from __future__ import annotations

from app.recall.fusion import Signals
from app.recall.hits import SearchHit
from app.recall.schemas import (
    HitExplanation,
    ImportanceExplanation,
    ListExplanation,
    RerankExplanation,
    SignalExplanation,
)


def explain(
    hit: SearchHit,
    signals: Signals,
    rerank: RerankExplanation | None = None,
    score: float | None = None,
    *,
    newer: str | None = None,
) -> HitExplanation:
    shares = hit.shares
    vector = fulltext = None
    vector_score = shares.vector_raw if shares else None
    fulltext_score = shares.fulltext_raw if shares else None
    if vector_score is None and hit.vector_rank is not None:
        vector_score = hit.vector_similarity
    if fulltext_score is None and hit.fulltext_rank is not None:
        fulltext_score = hit.fulltext_score
    if vector_score is not None:
        share = shares.vector if shares else hit.score
        vector = ListExplanation(rank=hit.vector_rank, score=vector_score, share=share)
    if fulltext_score is not None:
        share = shares.fulltext if shares else hit.score
        fulltext = ListExplanation(rank=hit.fulltext_rank, score=fulltext_score, share=share)
    weights = {
        "recency": signals.recency,
        "importance": signals.importance,
        "tags": signals.tags,
        "access": signals.access,
    }
    found = shares.signals if shares else {}
    scaled = None
    if shares is not None and shares.scaled is not None:
        scaled = (1 - signals.total_weight) * shares.scaled
    return HitExplanation(
        vector=vector,
        fulltext=fulltext,
        fused=shares.fused if shares else hit.score,
        relevance=hit.relevance,
        scaled=scaled,
        signals={
            name: SignalExplanation(value=v, weight=weights[name], contribution=weights[name] * v)
            for name, v in found.items()
        },
        rerank=rerank,
        score=hit.score if score is None else score,
        newer=newer,
        confidence=hit.confidence,
        source=hit.source,
        importance=ImportanceExplanation(
            written=hit.importance,
            learned=hit.importance if hit.learned_importance is None else hit.learned_importance,
            used=int(hit.feedback[2]) if hit.feedback else 0,
            unused=int(hit.feedback[3]) if hit.feedback else 0,
            pinned=int(hit.feedback[4]) if hit.feedback else 0,
            forgotten_nearby=int(hit.feedback[5]) if hit.feedback else 0,
        ),
    )
