"""A memory's search text: what recall searches for it (its vector is made of it, and its
full-text column, memory.search_tsv, is generated from it), built by one template from the
memory and its context. `content` stays exactly what the client stored and is all that
recall, context and prompts return; this text is never shown.

The `contextual` template (HTM_SEARCH_TEXT, the default) applies to conversation memories,
those whose metadata names a `speaker` or a `session`:

    [March 14, 2026] Leo: How's the new place?
    Mia: We finally brought home a beagle puppy!

the memory's date in the words a question uses, the turn before it in its session (by
`created_at`, as stored when this one is written) and its speaker. Any other memory is
searched by its content alone (search_text NULL), as with `plain`. Why this template:
evals/README.md (make eval, deployments `default` and `old-default`).

A memory's search text is built when it is written (add, PUT, a version restored); a turn
stored later does not change the text of the turn before it. After a change of template,
`htm reindex` builds every conversation memory's again (app/transfer/reindex.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from app.conversation import is_conversation, speaker_of, speaker_tag

SearchTemplate = Literal["contextual", "plain"]
# The turn before is context, not the memory: a long one is cut.
MAX_PREVIOUS_CHARS = 400


@dataclass(frozen=True)
class Turn:
    """The turn before a memory in its session."""

    speaker: str | None
    content: str


def with_speaker_tag(
    tags: list[str], metadata: dict[str, Any], template: SearchTemplate
) -> list[str]:
    """The memory's tags, with its speaker's (contextual template only); the client's tags
    first, as sent."""
    speaker = speaker_of(metadata)
    tag = speaker_tag(speaker) if speaker and template == "contextual" else None
    return tags if tag is None or tag in tags else [*tags, tag]


def date_words(at: datetime) -> str:
    """The UTC date, as stored times are read back (so that `htm reindex` builds the same)."""
    at = at.astimezone(UTC) if at.tzinfo is not None else at
    return f"{at:%B} {at.day}, {at.year}"


def _line(speaker: str | None, content: str) -> str:
    return f"{speaker}: {content}" if speaker else content


def build(
    template: SearchTemplate,
    content: str,
    at: datetime,
    metadata: dict[str, Any],
    previous: Turn | None,
) -> str | None:
    """The memory's search text, or None: search its content."""
    if template == "plain" or not is_conversation(metadata):
        return None
    lines = [f"[{date_words(at)}]"]
    if previous is not None:
        lines.append(_line(previous.speaker, previous.content[:MAX_PREVIOUS_CHARS]))
    lines.append(_line(speaker_of(metadata), content))
    return lines[0] + " " + "\n".join(lines[1:])


def searched(content: str, search_text: str | None) -> str:
    """What is embedded and full-text indexed: coalesce(search_text, content)."""
    return content if search_text is None else search_text
