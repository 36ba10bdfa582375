"""What makes a memory part of a conversation: metadata `speaker` (who said it) and
`session` (which conversation, an identifier unique in the namespace), as both the write path
(app/memories/search_text.py) and recall (a question naming a speaker, a hit's neighbouring
turns) read them."""

from __future__ import annotations

import re
from typing import Any

MAX_SPEAKER_CHARS = 100
MAX_SESSION_CHARS = 200

SPEAKER_TAG = "speaker"


def speaker_of(metadata: dict[str, Any]) -> str | None:
    """metadata `speaker` when it is a name (a string of 1-100 characters); the same rule
    as the speaker table's insert (app/memories/repository.py, SPEAKER_NAMED)."""
    s = metadata.get("speaker")
    if isinstance(s, str) and 1 <= len(s) <= MAX_SPEAKER_CHARS:
        return s
    return None


def session_of(metadata: dict[str, Any]) -> str | None:
    """metadata `session` as SQL's `metadata ->> 'session'` reads it: a string, or an
    integer (not a boolean)."""
    s = metadata.get("session")
    if isinstance(s, bool) or not isinstance(s, str | int):
        return None
    text = str(s)
    return text if 1 <= len(text) <= MAX_SESSION_CHARS else None


def is_conversation(metadata: dict[str, Any]) -> bool:
    return speaker_of(metadata) is not None or session_of(metadata) is not None


def speaker_tag(speaker: str) -> str | None:
    """`speaker:<name>` in the tag alphabet (lowercase, other characters as `-`), or None
    when nothing of the name is left."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", speaker.lower()).strip("-")[:50]
    return f"{SPEAKER_TAG}:{slug}" if slug else None


def named_in(question: str, speakers: list[str]) -> list[str]:
    """The speakers the question names, as whole words (any case; "Mia's" names Mia), in the
    order of `speakers`."""
    return [s for s in speakers if _name(s).search(question)]


def without_names(question: str, speakers: list[str]) -> str:
    """The question with these speakers' names taken out (and a possessive 's), spaces
    collapsed; the question itself when nothing else would be left."""
    text = question
    for s in speakers:
        text = _name(s).sub(" ", text)
    text = " ".join(text.split())
    return text if any(c.isalnum() for c in text) else question


def _name(speaker: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(speaker)}(?:['’]s)?(?!\w)", re.IGNORECASE)
