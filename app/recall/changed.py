"""Recall's "the newer statement first": when a page holds two hits stating values of the
same subject and attribute (app/claims.py: "Carla's favourite colour is green", then "...is
purple now") and both are current (a `statement` proposal left to confirm, or data written
before the rule), the newest of them takes the best place any of them had, the next newest
the next, and so on; hits of no such pair keep theirs. Each older one names the newest in
its `explain` (`newer`). It orders the page the search returned (`limit` hits, or the
reranker's candidates): a newer statement the search did not reach does not move it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from app.claims import Fact, me_of, parse
from app.recall.hits import SearchHit

T = TypeVar("T")


def newer_first(
    page: Sequence[T], hit_of: Callable[[T], SearchHit]
) -> tuple[list[T], dict[int, str]]:
    """The page reordered, and for each hit placed below a newer statement of its fact
    (by memory id) the key of the newest one (ties of age: the higher id is newer)."""
    facts: list[Fact | None] = [
        parse(h.content, me_of(h.metadata, h.author)) for h in map(hit_of, page)
    ]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(facts):
        if f is not None:
            groups.setdefault(f.key, []).append(i)
    order = list(page)
    newer: dict[int, str] = {}
    for places in groups.values():
        if len({f.value for i in places if (f := facts[i]) is not None}) < 2:
            continue  # one value, said again: nothing to put first
        by_age = sorted(places, key=lambda i: (hit_of(page[i]).created_at, hit_of(page[i]).id))
        newest = by_age[-1]
        for place, i in zip(places, reversed(by_age), strict=True):
            order[place] = page[i]
            if i != newest:
                newer[hit_of(page[i]).id] = hit_of(page[newest]).key
    return order, newer
