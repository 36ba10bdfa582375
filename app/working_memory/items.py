"""A working-memory item, and how items travel to and from the Lua scripts: every number
checked to survive Lua's doubles, every reply field parsed back."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

# Integers go through Lua doubles: exact only below 2**53.
MAX_INT = 2**53 - 1
MAX_IMPORTANCE = 10.0


class WMItem(NamedTuple):
    """One working-memory item. A NamedTuple: a snapshot builds a thousand of these, and
    tuples are several times cheaper to make than frozen dataclasses."""

    key: str
    content: str
    tokens: int
    importance: float
    added_at_us: int
    last_access_ms: int
    from_recall: bool = False
    memory_id: int = 0


class Outline(NamedTuple):
    """An item without its content: what ordering and fitting need (WorkingMemoryStore.outline).
    Its fields are WMItem's of the same names, so context.order() takes either."""

    key: str
    tokens: int
    importance: float
    added_at_us: int
    last_access_ms: int


def eviction_order(items: Iterable[WMItem]) -> list[WMItem]:
    """The items in eviction order, next victim first: importance ascending, then the oldest
    added_at, then the key (by code point, i.e. the UTF-8 bytes Redis compares). The evict set
    keeps the same order in Redis (scripts/common.lua, evict_member)."""
    return sorted(items, key=lambda i: (i.importance, i.added_at_us, i.key))


def check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise ValueError(f"{name} must be an integer in [0, 2**53): {value!r}")
    return value


def item_args(item: WMItem) -> list[str]:
    if not isinstance(item.key, str) or not item.key:
        raise ValueError(f"memory key must be a non-empty string: {item.key!r}")
    if not isinstance(item.content, str):
        raise ValueError(f"content of {item.key!r} must be a string")
    importance = item.importance
    if (
        isinstance(importance, bool)
        or not isinstance(importance, int | float)
        or not math.isfinite(importance)
        or not 0 <= importance <= MAX_IMPORTANCE
    ):
        raise ValueError(f"importance of {item.key!r} must be in [0, 10]: {importance!r}")
    return [
        item.key,
        item.content,
        str(check_int("tokens", item.tokens)),
        repr(float(importance)),  # repr round-trips; Lua's tonumber (strtod) reads it exactly
        str(check_int("added_at_us", item.added_at_us)),
        str(check_int("last_access_ms", item.last_access_ms)),
        "1" if item.from_recall else "0",
        str(check_int("memory_id", item.memory_id)),
    ]


def place_args(items: list[WMItem], budget: int) -> list[str]:
    args = [str(check_int("budget", budget)), str(len(items))]
    for item in items:
        args.extend(item_args(item))
    return args


def items_from_fields(keys: list[str], fields: list[list[str | None]]) -> list[WMItem]:
    """Snapshot reply arrays (one per field, in the keys' order) as items."""
    if any(None in values for values in fields):
        raise RuntimeError("working memory inconsistent: an item in evict order lacks a field")
    return [
        WMItem(
            key, content, int(tokens), float(imp), int(added), int(access), recall == "1", int(i)
        )
        for key, content, tokens, imp, added, access, recall, i in zip(keys, *fields, strict=True)
    ]
