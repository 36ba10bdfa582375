"""The heuristic importance scorer (HTM_IMPORTANCE_SCORER=heuristic): for an add that carries
no importance, a score from what its content says, in the spirit of Cogitator's signals.

The score is 1 (the default importance) plus the weight of each signal found, at most 10.
Each signal counts once, however often its phrases occur; phrases match whole words,
case-insensitively.

Signals (weight: phrases or condition):
- identity (4): my name is, call me, i am called, i'm called
- explicit (4): remember that, don't forget, do not forget, keep in mind, important:
- preference (3): i prefer, i like, i love, i don't like, i do not like, i hate, i dislike,
  my favourite, my favorite
- decision (3): we decided, i decided, decided to, decision:, we will use, we'll use,
  let's go with, agreed to
- tool result (1): type `tool_result`, or metadata with a `tool` field
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings
    from app.memories.schemas import MemoryCreate

BASE = 1.0
MAXIMUM = 10.0


def _phrases(*phrases: str) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(p).replace(r"\ ", r"\s+") for p in phrases)
    # A phrase ending in punctuation (`decision:`) has no word boundary after it.
    return re.compile(rf"(?<![\w'])(?:{alternatives})(?![\w'])", re.IGNORECASE)


SIGNALS: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("identity", 4.0, _phrases("my name is", "call me", "i am called", "i'm called")),
    (
        "explicit",
        4.0,
        _phrases("remember that", "don't forget", "do not forget", "keep in mind", "important:"),
    ),
    (
        "preference",
        3.0,
        _phrases(
            "i prefer",
            "i like",
            "i love",
            "i don't like",
            "i do not like",
            "i hate",
            "i dislike",
            "my favourite",
            "my favorite",
        ),
    ),
    (
        "decision",
        3.0,
        _phrases(
            "we decided",
            "i decided",
            "decided to",
            "decision:",
            "we will use",
            "we'll use",
            "let's go with",
            "agreed to",
        ),
    ),
)
TOOL_RESULT = 1.0


def signals(content: str, type_: str, metadata: dict[str, Any]) -> list[str]:
    """The names of the signals found, in the table's order."""
    found = [name for name, _, pattern in SIGNALS if pattern.search(content)]
    if type_ == "tool_result" or "tool" in metadata:
        found.append("tool_result")
    return found


def score(content: str, type_: str, metadata: dict[str, Any]) -> float:
    weights = {name: weight for name, weight, _ in SIGNALS} | {"tool_result": TOOL_RESULT}
    return min(MAXIMUM, BASE + sum(weights[s] for s in signals(content, type_, metadata)))


def importance_of(body: MemoryCreate, settings: Settings) -> float:
    """An add's importance: the body's; when it has none and the deployment scores adds
    (HTM_IMPORTANCE_SCORER), this scorer's."""
    if "importance" in body.model_fields_set or settings.importance_scorer == "off":
        return body.importance
    return score(body.content, body.type, body.metadata)
