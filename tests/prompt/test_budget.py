"""The allocation of app/prompt/budget.py without I/O: the count never exceeds the budget,
also when the count of the joined system message is not the sum of its parts."""

from __future__ import annotations

import pytest

from app.prompt.budget import (
    SEPARATOR,
    InputTooLarge,
    Item,
    Quotas,
    assemble,
    chat_tokens,
)


def chars(s: str) -> int:
    # Not additive over the "\n\n" separator (2 here, 1 in the estimate): the exact recount
    # must catch it.
    return len(s)


def candidates() -> tuple[list[Item], list[Item], list[Item]]:
    session = [Item("session", f"said {i}", 6, seq=i, role="user") for i in (3, 2, 1)]
    wm = [Item("working_memory", w, len(w), key=w) for w in ("alpha", "bravo", "charlie")]
    recall = [Item("recall", r, len(r), key=r) for r in ("bravo", "delta", "echo")]
    return session, wm, recall


@pytest.mark.parametrize("budget", range(30, 160))
def test_the_count_never_exceeds_the_budget_and_is_exact(budget: int) -> None:
    session, wm, recall = candidates()
    done = assemble(chars, budget, "hi", "sys", session, wm, recall, Quotas())
    assert done.tokens == chat_tokens(chars, done.messages) <= budget
    assert done.messages[-1] == {"role": "user", "content": "hi"}
    taken = [i.seq for i in session if i.included]
    assert taken == [3, 2, 1][: len(taken)]  # the newest, without gaps
    assert all(i.reason == "duplicate" for i in recall if i.key == "bravo")
    for item in [*session, *wm, *recall]:
        assert item.included == (item.reason is None)


def test_with_room_for_all_the_system_message_joins_sections_in_order() -> None:
    session, wm, recall = candidates()
    done = assemble(chars, 10_000, "hi", "sys", session, wm, recall, Quotas())
    system = SEPARATOR.join(
        ["sys", "Working memory:", "alpha", "bravo", "charlie", "Relevant memories:", "delta",
         "echo"]
    )  # fmt: skip
    assert done.messages == [
        {"role": "system", "content": system},
        {"role": "user", "content": "said 1"},
        {"role": "user", "content": "said 2"},
        {"role": "user", "content": "said 3"},
        {"role": "user", "content": "hi"},
    ]
    assert [(i.source, i.included, i.reason) for i in done.manifest] == [
        ("input", True, None),
        *[("session", True, None)] * 3,
        *[("working_memory", True, None)] * 3,
        ("recall", False, "duplicate"),
        ("recall", True, None),
        ("recall", True, None),
    ]


def test_input_and_system_text_alone_over_the_budget_is_refused() -> None:
    # 3 + (3 + 4 + 2) + (3 + 6 + 3) = 24
    with pytest.raises(InputTooLarge) as exc:
        assemble(chars, 23, "hi", "sys", [], [], [], Quotas())
    assert (exc.value.needed, exc.value.budget) == (24, 23)
    assert assemble(chars, 24, "hi", "sys", [], [], [], Quotas()).tokens == 24
