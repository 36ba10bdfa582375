"""`expand: "related"`: the top hits of a recall expanded by one edge of the memory graph
(app/relationships), the memories reached placed after the hits.

The rule: the answer keeps at most `limit` hits. The related memories take at most half of
it (⌊limit / 2⌋ places), so the search's own hits keep at least the other half; they come
from the first ⌈limit / 2⌉ hits, at most `EXPAND_FROM` of them, by one edge each (any type;
only current memories, none already a hit), ordered by the edge's weight, then the hit they
came from, then key. When fewer related memories are found, fewer of the search's last hits
give way. A related hit's score is its edge's weight times the score of the hit it came
from."""

from __future__ import annotations

from dataclasses import dataclass

from app.recall.hits import SearchHit
from app.relationships.repository import LinkRepository
from app.visibility import Reader

# How many of the top hits are expanded, at most.
EXPAND_FROM = 3


@dataclass(frozen=True)
class Via:
    key: str  # the hit it was reached from
    type: str  # the edge's type


async def related_hits(
    links: LinkRepository, reader: Reader, hits: list[SearchHit], limit: int
) -> tuple[list[SearchHit], list[tuple[SearchHit, Via]]]:
    """(the search's hits kept, the related hits after them)."""
    room = limit // 2
    top = hits[: min(EXPAND_FROM, limit - room)]
    if not top or room == 0:
        return hits, []
    rows = await links.expansion(
        reader.namespace_id,
        [(h.id, h.key, list(h.tags)) for h in top],
        [h.id for h in hits],
        limit=room,
        reader=reader,
    )
    by_key = {h.key: h for h in top}
    added = [
        (
            SearchHit(
                id=r.id,
                created_at=r.created_at,
                version=r.version,
                key=r.key,
                content=r.content,
                type=r.memory_type,
                importance=r.importance,
                confidence=r.confidence,
                source=r.source,
                tags=list(r.tags),
                metadata=r.metadata,
                author=r.author,
                token_count=r.token_count,
                score=r.weight * by_key[r.via].score,
                vector_rank=None,
                vector_similarity=None,
                fulltext_rank=None,
                fulltext_score=None,
            ),
            Via(r.via, r.type),
        )
        for r in rows
    ]
    return hits[: limit - len(added)], added
