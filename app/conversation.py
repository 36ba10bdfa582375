"""What makes a memory part of a conversation: metadata `speaker` (who said it) and
`session` (which conversation, an identifier unique in the namespace), as both the write path
(app/memories/search_text.py) and recall (a question naming a speaker, a hit's neighbouring
turns) read them."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
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
    """`speaker:<name>` in the tag alphabet (lowercase ASCII, accents dropped, other
    characters as `-`), or None when nothing of the name is left."""
    ascii_name = unicodedata.normalize("NFKD", speaker).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9._-]+", "-", ascii_name.lower()).strip("-")[:50]
    return f"{SPEAKER_TAG}:{slug}" if slug else None


def named_in(question: str, speakers: Sequence[str]) -> list[str]:
    """The speakers the question names, as whole words (any case; "Mia's" names Mia), in the
    order of `speakers`."""
    if not speakers:
        return []
    found = {m.group(1).casefold() for m in _names(tuple(speakers)).finditer(question)}
    return [s for s in speakers if s.casefold() in found]


def without_names(question: str, speakers: Sequence[str]) -> str:
    """The question with these speakers' names taken out (and a possessive 's), spaces
    collapsed; the question itself when nothing else would be left."""
    if not speakers:
        return question
    text = " ".join(_names(tuple(speakers)).sub(" ", question).split())
    return text if any(c.isalnum() for c in text) else question


@lru_cache(maxsize=1024)
def _names(speakers: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for a namespace's speakers (longest first, so "Ann Lee" wins over "Ann")."""
    alternatives = "|".join(re.escape(s) for s in sorted(speakers, key=len, reverse=True))
    return re.compile(rf"(?<!\w)({alternatives})(?:['’]s)?(?!\w)", re.IGNORECASE)
