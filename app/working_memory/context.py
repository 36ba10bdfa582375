"""Context assembly: prompt-ready text from working-memory items. Pure Python, no I/O.

assemble() is the reference: the service gets the same result from Redis, which orders and
cuts inside scripts/context_<strategy>.lua (WorkingMemoryStore.context), and calls
assemble() itself only on Postgres membership while Redis is down."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol, TypeVar

from app.working_memory.items import WMItem
from app.working_memory.store import STRATEGIES, ContextItem, Strategy

SEPARATOR = "\n\n"
US_PER_HOUR = 3_600_000_000


class Orderable(Protocol):
    """What order() reads of an item: a WMItem, or an Outline (no content)."""

    @property
    def key(self) -> str: ...
    @property
    def importance(self) -> float: ...
    @property
    def added_at_us(self) -> int: ...
    @property
    def last_access_ms(self) -> int: ...


Ordered = TypeVar("Ordered", bound=Orderable)


@dataclass(frozen=True)
class ContextResult:
    text: str
    items: list[ContextItem]
    tokens: int
    strategy: Strategy


def balanced_scores(
    importances: Iterable[float], added_at_us: Iterable[int], now_ms: int
) -> list[float]:
    """importance × 1/(1 + hours since added); items "added in the future" count as new.
    scripts/context_balanced.lua computes the same double operations, so the same values."""
    now_us = now_ms * 1000
    return [
        importance / (1.0 + (now_us - added if now_us > added else 0) / US_PER_HOUR)
        for importance, added in zip(importances, added_at_us, strict=True)
    ]


def order(items: Sequence[Ordered], strategy: Strategy, now_ms: int) -> list[tuple[float, Ordered]]:
    """(score, item) of every item in the strategy's order (assemble() says which)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: expected one of {STRATEGIES}")
    if strategy == "recent":
        scores = [float(i.last_access_ms) for i in items]
    elif strategy == "important":
        scores = [float(i.importance) for i in items]
    else:
        scores = balanced_scores(
            [i.importance for i in items], [i.added_at_us for i in items], now_ms
        )
    # Three stable sorts, last key first, rather than one on (-score, -added_at, key) tuples:
    # no tuple per item to build (1,000 items for a prompt), the same order.
    ranked = list(zip(scores, items, strict=True))
    ranked.sort(key=lambda p: p[1].key)
    ranked.sort(key=lambda p: p[1].added_at_us, reverse=True)
    ranked.sort(key=itemgetter(0), reverse=True)
    return ranked


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
    ranked = order(items, strategy, now_ms)  # an unknown strategy is refused first
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    taken: list[tuple[float, WMItem]] = []
    total = 0
    for s, item in ranked:
        if total + item.tokens > max_tokens:
            break
        taken.append((s, item))
        total += item.tokens
    return ContextResult(
        text=SEPARATOR.join(item.content for _, item in taken),
        items=[
            {"key": i.key, "tokens": i.tokens, "importance": i.importance, "score": s}
            for s, i in taken
        ],
        tokens=total,
        strategy=strategy,
    )
