"""Context assembly: each strategy's exact order, tie-breaking, and the max_tokens cut."""

from __future__ import annotations

import pytest

from app.working_memory.context import assemble
from tests.working_memory.helpers import item

NOW_MS = 1_700_000_000_000
NOW_US = NOW_MS * 1000
HOUR_US = 3_600_000_000
MIN_MS = 60_000

ITEMS = [
    item("a", tokens=10, importance=2, added=NOW_US - 10 * HOUR_US, access=NOW_MS - 5 * MIN_MS),
    item("b", tokens=20, importance=8, added=NOW_US - 30 * HOUR_US, access=NOW_MS - 60 * MIN_MS),
    item("c", tokens=30, importance=5, added=NOW_US - 1 * HOUR_US, access=NOW_MS - 1 * MIN_MS),
    item("d", tokens=40, importance=8, added=NOW_US - 2 * HOUR_US, access=NOW_MS - 120 * MIN_MS),
    item("e", tokens=5, importance=1, added=NOW_US, access=NOW_MS - 1 * MIN_MS),
    # "f" equals "a" in everything but its key: the key decides.
    item("f", tokens=10, importance=2, added=NOW_US - 10 * HOUR_US, access=NOW_MS - 5 * MIN_MS),
]


@pytest.mark.parametrize(
    ("strategy", "order"),
    [
        # c and e were both accessed a minute ago: e was added later, so it goes first.
        ("recent", ["e", "c", "a", "f", "b", "d"]),
        # b and d share importance 8: d was added later.
        ("important", ["d", "b", "c", "a", "f", "e"]),
        # d 8/3, c 5/2, e 1/1, b 8/31, a = f 2/11.
        ("balanced", ["d", "c", "e", "b", "a", "f"]),
    ],
)
def test_strategy_orders_items_exactly(strategy, order):
    result = assemble(ITEMS, strategy, max_tokens=1000, now_ms=NOW_MS)
    assert [i["key"] for i in result.items] == order
    assert result.text == "\n\n".join(f"content of {k}" for k in order)
    assert result.tokens == 115
    assert result.strategy == strategy


def test_balanced_scores_decay_with_hours_since_added():
    result = assemble(ITEMS, "balanced", max_tokens=1000, now_ms=NOW_MS)
    assert {i["key"]: i["score"] for i in result.items} == pytest.approx(
        {"d": 8 / 3, "c": 5 / 2, "e": 1.0, "b": 8 / 31, "a": 2 / 11, "f": 2 / 11}
    )


def test_taking_stops_at_first_item_that_would_exceed_max_tokens():
    # important: d 40, b 20 (60), then c 30 would make 90 > 70. a (10) would still fit, but
    # taking stops, so the context is a prefix of the order.
    result = assemble(ITEMS, "important", max_tokens=70, now_ms=NOW_MS)
    assert [i["key"] for i in result.items] == ["d", "b"]
    assert result.tokens == 60
    assert result.text == "content of d\n\ncontent of b"


def test_exact_fit_is_included_and_zero_budget_gives_empty_context():
    assert [i["key"] for i in assemble(ITEMS, "recent", 45, NOW_MS).items] == ["e", "c", "a"]
    empty = assemble(ITEMS, "recent", 0, NOW_MS)
    assert (empty.text, empty.items, empty.tokens) == ("", [], 0)


def test_unknown_strategy_and_negative_max_tokens_are_rejected():
    with pytest.raises(ValueError):
        assemble(ITEMS, "random", 10, NOW_MS)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        assemble(ITEMS, "recent", -1, NOW_MS)
