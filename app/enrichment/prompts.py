"""What the enrichment worker asks the model, and how it reads the answers (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

from app.common import TAG_PATTERN
from app.llm.base import LlmError, Message

MAX_TAGS = 5
MAX_PROPOSITIONS = 20
MAX_PROPOSITION_CHARS = 1000
_TAG = re.compile(TAG_PATTERN)


def tags_prompt(content: str, ontology: list[str]) -> list[Message]:
    known = "\n".join(ontology) if ontology else "(none yet)"
    return [
        {
            "role": "system",
            "content": "You label memories of an AI agent with hierarchical tags: lowercase "
            "segments joined by ':' from general to specific (e.g. database:postgresql:tuning). "
            f"Prefer the existing tags below; propose a new path only when none fits. At most "
            f'{MAX_TAGS} tags. Answer with JSON only: {{"tags": ["..."]}}.\n\n'
            f"Existing tags:\n{known}",
        },
        {"role": "user", "content": content},
    ]


def propositions_prompt(content: str) -> list[Message]:
    return [
        {
            "role": "system",
            "content": "Split the text into propositions: short, self-contained, atomic facts, "
            "each understandable without the others (resolve pronouns). At most "
            f'{MAX_PROPOSITIONS}. Answer with JSON only: {{"propositions": ["..."]}}.',
        },
        {"role": "user", "content": content},
    ]


def _list(reply: Any, field: str) -> list[Any]:
    value = reply.get(field) if isinstance(reply, dict) else None
    if not isinstance(value, list):
        raise LlmError(
            f"the model's reply has no {field!r} list: {json.dumps(reply)[:200]}", transient=False
        )
    return value


def proposed_tags(reply: Any, max_tags: int) -> list[str]:
    """The valid tags of the reply, lowercased, once each, at most min(MAX_TAGS, max_tags);
    invalid ones are dropped (the model's other tags still count)."""
    tags: list[str] = []
    for tag in _list(reply, "tags"):
        if isinstance(tag, str) and _TAG.fullmatch(tag.strip().lower()):
            tag = tag.strip().lower()
            if tag not in tags:
                tags.append(tag)
    return tags[: min(MAX_TAGS, max_tags)]


def propositions(reply: Any) -> list[str]:
    found: list[str] = []
    for p in _list(reply, "propositions"):
        if isinstance(p, str) and p.strip() and "\x00" not in p:
            text = p.strip()[:MAX_PROPOSITION_CHARS]
            if text not in found:
                found.append(text)
    return found[:MAX_PROPOSITIONS]
