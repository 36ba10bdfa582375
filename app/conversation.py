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
    """The speakers the question names, in the order of `speakers` (`mentions`' rules)."""
    found = {speaker for speaker, _, _ in mentions(question, speakers)}
    return [s for s in speakers if s in found]


def without_names(question: str, speakers: Sequence[str]) -> str:
    """The question with its mentions of these speakers taken out (`mentions`' rules, a
    possessive 's with them), spaces collapsed; the question itself when nothing else would
    be left."""
    spans = [(start, end) for _, start, end in mentions(question, speakers)]
    if not spans:
        return question
    parts, at = [], 0
    for start, end in spans:
        parts.append(question[at:start])
        at = end
    parts.append(question[at:])
    text = " ".join(" ".join(parts).split())
    return text if any(c.isalnum() for c in text) else question


# A word of a question that is capitalised but names nobody: the words a question starts
# with, and the ones a sentence of it may.
_NOT_NAMES = frozenset(
    "what why how when where who whom whose which did does do is are was were has have had "
    "can could would should will shall may might must in on at of for from to by with about "
    "after before during since until based the a an if and or but not no yes any some this "
    "that these those there here its it they their them he she his her him we our you your "
    "i my me".split()
)
FUZZY_MIN_CHARS = 4  # a name part shorter than this is matched whole only
FUZZY_RATIO = 0.7  # difflib's ratio of a word and a name part, case-folded


def mentions(question: str, speakers: Sequence[str]) -> list[tuple[str, int, int]]:
    """Where the question names which speaker: (speaker, start, end), in order, each span
    with its possessive 's. Three rules, the first that holds for a span:

    1. the whole name, in any case, as whole words ("MIA's" names Mia; the longest name
       first, so "Ann Lee" wins over "Ann");
    2. one word of a speaker's multi-word name, capitalised in the question, when no other
       speaker's name has that word ("Fahim" names "Fahim Khan");
    3. a capitalised word of at least FUZZY_MIN_CHARS that is not a question's common word,
       spelt like a word of one speaker's name (the same first letter, difflib's ratio at
       least FUZZY_RATIO, the nearest; "Muhammad" and "Mohammed" name "Muhhamed", "Aqib"
       names "Akib"), as people spell each other's names.
    """
    if not speakers:
        return []
    found = [
        (_by_fold(tuple(speakers))[m.group(1).casefold()], m.start(), m.end())
        for m in _names(tuple(speakers)).finditer(question)
    ]
    taken = [(start, end) for _, start, end in found]
    parts = _parts(tuple(speakers))
    for m in _WORD.finditer(question):
        word = m.group(1)
        if not word[0].isupper() or any(s < m.end() and m.start() < e for s, e in taken):
            continue
        folded = word.casefold()
        speaker = parts.get(folded)
        if speaker is None and len(word) >= FUZZY_MIN_CHARS and folded not in _NOT_NAMES:
            speaker = _nearest(folded, parts)
        if speaker is not None:
            found.append((speaker, m.start(), m.end()))
    return sorted(found, key=lambda f: f[1])


_WORD = re.compile(r"(?<!\w)([^\W\d_]+)(?:['’]s)?(?!\w)")


@lru_cache(maxsize=1024)
def _by_fold(speakers: tuple[str, ...]) -> dict[str, str]:
    return {s.casefold(): s for s in speakers}


@lru_cache(maxsize=1024)
def _parts(speakers: tuple[str, ...]) -> dict[str, str]:
    """Each word of a multi-word name that no other speaker's name has, case-folded → its
    speaker (rule 2), and every speaker's one-word name (rule 3's candidates too)."""
    owners: dict[str, set[str]] = {}
    for s in speakers:
        for w in s.split():
            owners.setdefault(w.casefold(), set()).add(s)
    return {w: next(iter(o)) for w, o in owners.items() if len(o) == 1}


def _nearest(word: str, parts: dict[str, str]) -> str | None:
    """The speaker whose name part is spelt most like `word` (rule 3), or None: none near
    enough, or two speakers as near."""
    from difflib import SequenceMatcher

    near = [
        (SequenceMatcher(None, word, part).ratio(), speaker)
        for part, speaker in parts.items()
        if len(part) >= FUZZY_MIN_CHARS and part[0] == word[0]
    ]
    near = [(r, s) for r, s in near if r >= FUZZY_RATIO]
    if not near:
        return None
    top = max(r for r, _ in near)
    nearest = {s for r, s in near if r == top}
    return next(iter(nearest)) if len(nearest) == 1 else None


@lru_cache(maxsize=1024)
def _names(speakers: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for a namespace's speakers (longest first, so "Ann Lee" wins over "Ann")."""
    alternatives = "|".join(re.escape(s) for s in sorted(speakers, key=len, reverse=True))
    return re.compile(rf"(?<!\w)({alternatives})(?:['’]s)?(?!\w)", re.IGNORECASE)
