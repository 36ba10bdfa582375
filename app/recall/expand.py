"""`expand: "related"`: the top hits of a recall expanded by one edge of the memory graph
(app/relationships), the memories reached placed after the hits; `expand: "entities"`: by
the entities the top hits name but the question does not (app/entities), for a question
that needs a second hop ("where does the friend Carla met in Lisbon work?": a hit names
Ana, the second hop finds Ana's turns).

The rule: the answer keeps at most `limit` hits. The related memories take at most half of
it (⌊limit / 2⌋ places), so the search's own hits keep at least the other half; they come
from the first ⌈limit / 2⌉ hits, at most `EXPAND_FROM` of them, by one edge each (any type;
only current memories, none already a hit), ordered by the edge's weight, then the hit they
came from, then key. When fewer related memories are found, fewer of the search's last hits
give way. A related hit's score is its edge's weight times the score of the hit it came
from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from app.entities.repository import EntityRepository
from app.recall.hits import SearchHit
from app.recall.query import SearchQuery
from app.relationships.repository import LinkRepository
from app.visibility import Reader

# How many of the top hits are expanded, at most.
EXPAND_FROM = 3


@dataclass(frozen=True)
class Via:
    key: str | None  # the hit it was reached from (None: the question named its entity)
    type: str  # the edge's type, or "entity"
    entity: str | None = None  # expand "entities": the entity it names


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


async def entity_hits(
    entities: EntityRepository,
    search: Callable[[SearchQuery], Awaitable[list[SearchHit]]],
    query: SearchQuery,
    hits: list[SearchHit],
    limit: int,
    *,
    skip: Sequence[str] = (),
) -> tuple[list[SearchHit], list[tuple[SearchHit, Via]]]:
    """(the search's hits kept, the entity hits after them). The rule is `related_hits`'s
    (at most ⌊limit / 2⌋ places, the search's last hits giving way), with the entities of
    the first ⌈limit / 2⌉ hits (at most `EXPAND_FROM`) in place of edges, but those of
    `skip` (keys: what the question names, the speakers): the same search again, among the
    memories naming any of them (their aliases too) and not already hits, in its own order.
    Each is marked with the first of those entities it names and the hit that named it."""
    room = limit // 2
    top = hits[: min(EXPAND_FROM, limit - room)]
    if room == 0 or not top:
        return hits, []
    ns = query.namespace_id
    skipped = set(await entities.canonical(ns, skip))
    source: dict[str, str] = {}
    key_of = {h.id: h.key for h in top}
    for memory_id, entity in await entities.named_by(ns, list(key_of)):
        if entity not in skipped:
            source.setdefault(entity, key_of[memory_id])
    if not source:
        return hits, []
    names = await entities.names(ns, list(source))
    hop = replace(query, filters=replace(query.filters, entity_names=tuple(names)))
    seen = {h.id for h in hits}
    found = await search(replace(hop, limit=room + len(seen)))
    extra = [h for h in found if h.id not in seen][:room]
    named: dict[int, set[str]] = {h.id: set() for h in extra}
    for memory_id, entity in await entities.named_by(ns, list(named)):
        named[memory_id].add(entity)
    added = []
    for h in extra:
        first = next((e for e in source if e in named[h.id]), None)
        added.append((h, Via(source[first] if first else None, "entity", first)))
    return hits[: limit - len(added)], added
