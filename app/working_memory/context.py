"""Context assembly: prompt-ready text from working-memory items. Pure Python, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from app.working_memory.store import WMItem

Strategy = Literal["recent", "important", "balanced"]
STRATEGIES: tuple[Strategy, ...] = ("recent", "important", "balanced")
SEPARATOR = "\n\n"
US_PER_HOUR = 3_600_000_000


class ContextItem(NamedTuple):
    key: str
    tokens: int
    importance: float
    score: float  # the strategy's ranking value: last access ms, importance, or balanced score


@dataclass(frozen=True)
class ContextResult:
    text: str
    items: list[ContextItem]
    tokens: int
    strategy: Strategy


def balanced_score(item: WMItem, now_ms: int) -> float:
    """importance × 1/(1 + hours since added); items "added in the future" count as new."""
    hours = max(0, now_ms * 1000 - item.added_at_us) / US_PER_HOUR
    return item.importance / (1.0 + hours)


def assemble(
    items: list[WMItem], strategy: Strategy, max_tokens: int, now_ms: int
) -> ContextResult:
    """Order items by strategy and take them until the next one would exceed max_tokens.

    recent: last access, newest first; important: importance, highest first; balanced:
    importance × 1/(1 + hours since added), highest first. Ties go to the newer added_at, then
    to the smaller key, so the order is total and repeatable.

    Taking stops at the first item that does not fit; smaller items after it are not used,
    so the context is always a prefix of the strategy's order. ``tokens`` is the sum of the
    included items' token counts: the "\\n\\n" separators are not counted.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: expected one of {STRATEGIES}")
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")

    def score(item: WMItem) -> float:
        if strategy == "recent":
            return float(item.last_access_ms)
        if strategy == "important":
            return float(item.importance)
        return balanced_score(item, now_ms)

    ranked = sorted(
        ((score(i), i) for i in items), key=lambda p: (-p[0], -p[1].added_at_us, p[1].key)
    )
    taken: list[tuple[float, WMItem]] = []
    total = 0
    for s, item in ranked:
        if total + item.tokens > max_tokens:
            break
        taken.append((s, item))
        total += item.tokens
    return ContextResult(
        text=SEPARATOR.join(item.content for _, item in taken),
        items=[ContextItem(i.key, i.tokens, i.importance, s) for s, i in taken],
        tokens=total,
        strategy=strategy,
    )
