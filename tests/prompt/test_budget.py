"""The allocation of app/prompt/budget.py without I/O: the count never exceeds the budget,
also when the count of the joined system message is not the sum of its parts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.prompt.budget import (
    SEPARATOR,
    Assembly,
    CountJoined,
    InputTooLarge,
    Item,
    Quotas,
    allocate,
    chat_tokens,
    finish,
)
from app.tokens import Tokenizer

Candidates = tuple[list[Item], list[Item], list[Item]]


def assemble(
    count: Callable[[str], int],
    budget: int,
    input_text: str,
    *,
    system: str,
    candidates: Candidates = ([], [], []),
    count_joined: CountJoined | None = None,
) -> Assembly:
    """allocate() then finish() without quotas, every content known up front (as the
    service's fallback)."""
    session, wm, recall = candidates
    fitting = allocate(
        count, budget, input_text, system=system, session=session, working_memory=wm,
        recall=recall, quotas=Quotas(), count_joined=count_joined,
    )  # fmt: skip
    return finish(fitting)


def chars(s: str) -> int:
    # Not additive over the "\n\n" separator (2 here, 1 in the estimate): the exact recount
    # must catch it.
    return len(s)


def candidates() -> Candidates:
    session = [Item("session", f"said {i}", 6, seq=i, role="user") for i in (3, 2, 1)]
    wm = [Item("working_memory", w, len(w), key=w) for w in ("alpha", "bravo", "charlie")]
    recall = [Item("recall", r, len(r), key=r) for r in ("bravo", "delta", "echo")]
    return session, wm, recall


@pytest.mark.parametrize("budget", range(30, 160))
def test_the_count_never_exceeds_the_budget_and_is_exact(budget: int) -> None:
    session, wm, recall = candidates()
    done = assemble(chars, budget, "hi", system="sys", candidates=(session, wm, recall))
    assert done.tokens == chat_tokens(chars, done.messages) <= budget
    assert done.messages[-1] == {"role": "user", "content": "hi"}
    taken = [i.seq for i in session if i.included]
    assert taken == [3, 2, 1][: len(taken)]  # the newest, without gaps
    assert all(i.reason == "duplicate" for i in recall if i.key == "bravo")
    for item in [*session, *wm, *recall]:
        assert item.included == (item.reason is None)


def test_with_room_for_all_the_system_message_joins_sections_in_order() -> None:
    session, wm, recall = candidates()
    done = assemble(chars, 10_000, "hi", system="sys", candidates=(session, wm, recall))
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
        assemble(chars, 23, "hi", system="sys")
    assert (exc.value.needed, exc.value.budget) == (24, 23)
    assert assemble(chars, 24, "hi", system="sys").tokens == 24


# --- with tiktoken and the stored counts -----------------------------------------------------

TRICKY = [
    "Ends in a full stop.",
    "ends in a space ",
    "ends in a newline\n",
    "\nstarts with a newline",
    "  starts with spaces",
    "/starts with a slash",
    "it's",
    "ends in two blank lines\n\n",
    "漢字。",
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load("cl100k_base")


def tricky_candidates(count: Callable[[str], int]) -> Candidates:
    session = [Item("session", c, count(c), seq=i, role="assistant") for i, c in
               enumerate(["said. ", " \n"], 1)][::-1]  # fmt: skip
    wm = [Item("working_memory", c, count(c), key=f"w{i}") for i, c in enumerate(TRICKY)]
    recall = [Item("recall", c, count(c), key=f"r{i}") for i, c in enumerate(TRICKY[::-1])]
    return session, wm, recall


@pytest.mark.parametrize("budget", range(60, 200, 3))
def test_stored_counts_and_joined_count_give_the_encoded_count_and_the_same_manifest(
    tokenizer: Tokenizer, budget: int
) -> None:
    # The stored counts path (count_joined) against encoding every assembled message: the
    # same count, the same messages and the same manifest, at every budget.
    count = tokenizer.count
    fast = assemble(count, budget, "hi ", system="sys.", candidates=tricky_candidates(count),
                    count_joined=tokenizer.count_joined)  # fmt: skip
    slow = assemble(count, budget, "hi ", system="sys.", candidates=tricky_candidates(count))
    assert fast.tokens == chat_tokens(count, fast.messages) <= budget
    assert (fast.messages, fast.tokens, fast.manifest) == (slow.messages, slow.tokens,
                                                           slow.manifest)  # fmt: skip


def test_with_room_for_all_the_count_is_exact_and_not_the_sum_of_the_parts(
    tokenizer: Tokenizer,
) -> None:
    count = tokenizer.count
    session, wm, recall = tricky_candidates(count)
    done = assemble(count, 10_000, "hi ", system="sys.", candidates=(session, wm, recall),
                    count_joined=tokenizer.count_joined)  # fmt: skip
    assert all(i.included for i in done.manifest)
    assert done.tokens == chat_tokens(count, done.messages) == 126
    parts = ["sys.", "Working memory:", *TRICKY, "Relevant memories:", *TRICKY[::-1]]
    system = SEPARATOR.join(parts)
    assert done.messages[0] == {"role": "system", "content": system}
    # Summing the parts' counts, one token per blank line, would be 14 too many here.
    assert count(system) == 101
    assert sum(map(count, parts)) + len(parts) - 1 == 101 + 14
