"""What the fact extraction asks the model, and how it reads the answer (pure).

The model is shown the turns numbered from 1, each with its speaker, and asked for JSON:
`{"facts": [{"text": "...", "kind": "fact" | "preference", "turns": [1, 3]}]}`. The reply is
read strictly where a wrong shape would write something wrong: not JSON, no `facts` list, an
item that is not an object → the whole reply is refused (LlmError, not transient), so nothing
is written. An item with empty text, an unknown kind or no valid turn number is dropped (the
others stand); repeated texts are kept once, their turns joined."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.llm.base import LlmError, Message

MAX_FACTS = 50
MAX_FACT_CHARS = 1000
KINDS = ("fact", "preference")


@dataclass(frozen=True)
class Turn:
    key: str
    speaker: str | None
    content: str


@dataclass(frozen=True)
class ExtractedFact:
    text: str
    kind: str  # fact | preference
    turns: tuple[int, ...]  # 0-based positions in the turns shown


def facts_prompt(turns: list[Turn]) -> list[Message]:
    lines = [f"{i}. {t.speaker or 'unknown'}: {t.content}" for i, t in enumerate(turns, 1)]
    return [
        {
            "role": "system",
            "content": "You read a conversation and write down what is worth remembering "
            "about its people: atomic facts (one statement each, self-contained, naming the "
            "person instead of a pronoun, e.g. 'Ana works at the harbour office') and "
            "preferences (likes, dislikes, wishes, e.g. 'Ana is vegetarian'). Skip small talk, "
            f"greetings and questions. At most {MAX_FACTS}. Answer with JSON only: "
            '{"facts": [{"text": "...", "kind": "fact" or "preference", "turns": [the '
            'numbers of the turns it comes from]}]}. No facts: {"facts": []}.',
        },
        {"role": "user", "content": "\n".join(lines)},
    ]


def _refuse(reply: Any, why: str) -> LlmError:
    return LlmError(f"{why}: {json.dumps(reply)[:200]}", transient=False)


def extracted_facts(reply: Any, n_turns: int) -> list[ExtractedFact]:
    """The reply's facts, in its order (see the module's rules)."""
    items = reply.get("facts") if isinstance(reply, dict) else None
    if not isinstance(items, list):
        raise _refuse(reply, "the model's reply has no 'facts' list")
    found: dict[str, ExtractedFact] = {}
    for item in items:
        if not isinstance(item, dict):
            raise _refuse(reply, "a fact in the model's reply is not an object")
        text, kind, turns = item.get("text"), item.get("kind", "fact"), item.get("turns")
        if not isinstance(text, str) or not text.strip() or "\x00" in text:
            continue
        if kind not in KINDS or not isinstance(turns, list):
            continue
        positions = tuple(
            sorted(
                {
                    t - 1
                    for t in turns
                    if isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= n_turns
                }
            )
        )
        if not positions:
            continue
        text = " ".join(text.split())[:MAX_FACT_CHARS]
        if text in found:
            joined = tuple(sorted({*found[text].turns, *positions}))
            found[text] = ExtractedFact(text, found[text].kind, joined)
        else:
            found[text] = ExtractedFact(text, kind, positions)
    return list(found.values())[:MAX_FACTS]
