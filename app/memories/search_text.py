"""A memory's search text: what recall's full text searches for it (memory.search_tsv is
generated from it; its vector is made of it too with HTM_EMBED_TEXT=search_text, and by
default of `vector_input`, its speaker and content), built by one template from the memory
and its context. `content` stays exactly what the client stored and is all that
recall, context and prompts return; this text is never shown.

The `dated` template (HTM_SEARCH_TEXT, the default) applies to conversation memories, those
whose metadata names a `speaker` or a `session`:

    [March 14, 2026] Mia: We finally brought home a beagle puppy!

the memory's date in the words a question uses and its speaker. `contextual` puts the turn
before it in its session (by `created_at`, as stored when this one is written) between them:

    [March 14, 2026] Leo: How's the new place?
    Mia: We finally brought home a beagle puppy!

which was the default while a turn's vector was made of its search text: the turn before
then helped the vector more than it cost full text. With the vector made of `speaker:
content` (HTM_EMBED_TEXT=speaker), it only dilutes full text (make eval 2026-12-07: full text
alone 0.491 → 0.521 on the real chats, hybrid's dev half 0.649 → 0.668; evals/README.md). Any
other memory is searched by its content alone (search_text NULL), as with `plain`.

A memory's search text is built when it is written (add, PUT, a version restored), by
`search_texts` for the memories a write holds: each conversation memory's turn before it is
the batch's own earlier turn of its session, or else the latest one stored (TurnRepository,
one statement for the batch). A turn stored later does not change the text of the turn before
it. After a change of template, `htm reindex` builds every conversation memory's again
(app/transfer/reindex.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Literal, NamedTuple

from app.conversation import session_of, speaker_of, speaker_tag
from app.memories.turn_repository import Turn, TurnRepository

SearchTemplate = Literal["contextual", "dated", "plain"]
# The turn before is context, not the memory: a long one is cut.
MAX_PREVIOUS_CHARS = 400


class Written(NamedTuple):
    """A memory being written, as its search text and tags are built from it."""

    content: str
    created_at: datetime | None  # None: now
    metadata: dict[str, Any]
    tags: Sequence[str] = ()


@dataclass(frozen=True)
class Searched:
    """What recall searches for a memory being written: its search text (None: its
    content) and its tags, with its speaker's (contextual template only, after the client's
    tags, as sent); and whether it is a conversation's turn (metadata `speaker` or
    `session`)."""

    text: str | None
    tags: list[str]
    conversation: bool


class _Said(NamedTuple):
    """A memory's part in a conversation, read from its metadata once."""

    speaker: str | None
    session: str | None


async def search_texts(
    turns: TurnRepository,
    template: SearchTemplate,
    namespace_id: int,
    *,
    now: datetime,
    items: Sequence[Written],
    skip: list[int] | None = None,
) -> list[Searched]:
    """Each item's search text and tags, in order. `skip`: a memory being replaced is not
    its own turn before."""
    said = [_Said(speaker_of(w.metadata), session_of(w.metadata)) for w in items]
    conversation = [s.speaker is not None or s.session is not None for s in said]
    previous: dict[int, Turn] = {}
    ats = [w.created_at or now for w in items]
    if template == "contextual" and any(conversation):
        previous = await _turns_before(turns, namespace_id, items, said=said, ats=ats, skip=skip)
    return [
        Searched(
            _build(template, w.content, ats[i], speaker=said[i].speaker, previous=previous.get(i))
            if conversation[i]
            else None,
            _with_speaker_tag(list(w.tags), said[i].speaker, template),
            conversation[i],
        )
        for i, w in enumerate(items)
    ]


async def _turns_before(
    turns: TurnRepository,
    namespace_id: int,
    items: Sequence[Written],
    *,
    said: list[_Said],
    ats: list[datetime],
    skip: list[int] | None,
) -> dict[int, Turn]:
    """Each conversation item's turn before it: the batch's own earlier turn of its session,
    else (for each session's earliest item) the latest one stored."""
    previous: dict[int, Turn] = {}
    first: list[int] = []  # each session's earliest item: its turn before is stored, if any
    sessions: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(said):
        if s.session is not None:
            sessions[s.session].append(i)
    for order in sessions.values():
        order.sort(key=lambda i: (ats[i], i))
        first.append(order[0])
        for before, i in pairwise(order):
            previous[i] = Turn(said[before].speaker, items[before].content)
    wanted = [(str(said[i].session), ats[i]) for i in first]
    for i, turn in zip(first, await turns.previous(namespace_id, wanted, skip), strict=True):
        if turn is not None:
            previous[i] = turn
    return previous


def _with_speaker_tag(tags: list[str], speaker: str | None, template: SearchTemplate) -> list[str]:
    tag = speaker_tag(speaker) if speaker and template != "plain" else None
    return tags if tag is None or tag in tags else [*tags, tag]


def date_words(at: datetime) -> str:
    """The UTC date, as stored times are read back (so that `htm reindex` builds the same)."""
    at = at.astimezone(UTC) if at.tzinfo is not None else at
    return f"{at:%B} {at.day}, {at.year}"


def _line(speaker: str | None, content: str) -> str:
    return f"{speaker}: {content}" if speaker else content


def _build(
    template: SearchTemplate,
    content: str,
    at: datetime,
    *,
    speaker: str | None,
    previous: Turn | None,
) -> str | None:
    """A conversation memory's search text, or None: search its content."""
    if template == "plain":
        return None
    lines = [f"[{date_words(at)}]"]
    if previous is not None:
        lines.append(_line(previous.speaker, previous.content[:MAX_PREVIOUS_CHARS]))
    lines.append(_line(speaker, content))
    return lines[0] + " " + "\n".join(lines[1:])


def searched(content: str, search_text: str | None) -> str:
    """What is embedded and full-text indexed: coalesce(search_text, content)."""
    return content if search_text is None else search_text


EmbedText = Literal["speaker", "search_text"]


def vector_input(
    content: str, metadata: dict[str, Any], search_text: str | None, mode: EmbedText
) -> str:
    """What a memory's vector is made of (HTM_EMBED_TEXT): its searched text, or (`speaker`)
    its content after its speaker's name, `Leo: ...`, when its metadata names one. The turn
    before and the date in words help full text (a question's words) more than a vector: a
    sentence embedding of two turns is neither's (make eval, evals/results/)."""
    if mode == "search_text":
        return searched(content, search_text)
    speaker = speaker_of(metadata)
    return content if speaker is None else f"{speaker}: {content}"


def same_vector_input(
    old: tuple[str, dict[str, Any], str | None], new: tuple[str, dict[str, Any], str | None]
) -> bool:
    """Whether a memory rewritten from `old` to `new` (content, metadata, search text) keeps
    its vector, whichever HTM_EMBED_TEXT made it: the same searched text and the same
    speaker."""
    return searched(old[0], old[2]) == searched(new[0], new[2]) and speaker_of(
        old[1]
    ) == speaker_of(new[1])
