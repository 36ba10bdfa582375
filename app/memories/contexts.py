"""The search texts of memories being written (app/memories/search_text.py): each
conversation memory's turn before it is the batch's own earlier turn of its session, or
else the latest one stored (TurnRepository, one statement for the batch)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any, NamedTuple

from app.conversation import is_conversation, session_of, speaker_of
from app.memories.search_text import SearchTemplate, Turn, build
from app.memories.turn_repository import TurnRepository


class Written(NamedTuple):
    content: str
    created_at: datetime | None  # None: now
    metadata: dict[str, Any]


async def search_texts(
    turns: TurnRepository,
    template: SearchTemplate,
    namespace_id: int,
    now: datetime,
    items: Sequence[Written],
    skip: list[int] | None = None,
) -> list[str | None]:
    """Each item's search text (None: its content), in order. `skip`: a memory being
    replaced is not its own turn before."""
    if template == "plain" or not any(is_conversation(w.metadata) for w in items):
        return [None] * len(items)
    ats = [w.created_at or now for w in items]
    previous: dict[int, Turn] = {}
    first: list[int] = []  # each session's earliest item: its turn before is stored, if any
    sessions: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(items):
        s = session_of(w.metadata)
        if s is not None:
            sessions[s].append(i)
    for order in sessions.values():
        order.sort(key=lambda i: (ats[i], i))
        first.append(order[0])
        for before, i in pairwise(order):
            previous[i] = Turn(speaker_of(items[before].metadata), items[before].content)
    wanted = [(str(session_of(items[i].metadata)), ats[i]) for i in first]
    for i, turn in zip(first, await turns.previous(namespace_id, wanted, skip), strict=True):
        if turn is not None:
            previous[i] = turn
    return [
        build(template, w.content, ats[i], w.metadata, previous.get(i)) for i, w in enumerate(items)
    ]
