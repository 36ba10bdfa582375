"""overflow "summarize" in app/prompt/budget.py without I/O: the summary's room, its exact
count within the budget at every budget (a property over budgets and candidates, tiktoken),
and nothing taken before is ever dropped for it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from app.prompt.budget import (
    SEPARATOR,
    SUMMARY_HEADER,
    Assembly,
    Fitting,
    InputTooLarge,
    Item,
    Quotas,
    allocate,
    chat_tokens,
    finish,
    left_out,
    place_summary,
    summary_room,
)
from app.summaries.extract import digest
from app.tokens import Tokenizer

TOKENIZER = Tokenizer.load("cl100k_base")
COUNT = TOKENIZER.count
SENTENCES = [
    "Alice prefers window seats.",
    "The Lisbon office opens at nine!",
    "Trams are yellow",
    "Flights leave from terminal 2.",
    "it's raining in Porto\n",
    "漢字。",
    "Ends in a space. ",
    "/slash first?",
]


def fitted(
    budget: int,
    texts: Sequence[Sequence[str]],
    *,
    system: str | None = "sys.",
    quotas: Quotas = Quotas(),
) -> tuple[Fitting, Assembly]:
    """allocate() and finish() over session, working-memory and recall candidates made of
    `texts` (each a list of sentences), a third each."""
    items = [" ".join(t) for t in texts]
    session = [Item("session", c, COUNT(c), seq=n, role="user") for n, c in enumerate(items[0::3])]
    wm = [Item("working_memory", c, COUNT(c), key=f"w{n}") for n, c in enumerate(items[1::3])]
    recall = [Item("recall", c, COUNT(c), key=f"r{n}") for n, c in enumerate(items[2::3])]
    f = allocate(
        COUNT, budget, "hi", system=system, session=session, working_memory=wm, recall=recall,
        quotas=quotas, count_joined=TOKENIZER.count_joined,
    )  # fmt: skip
    return f, finish(f)


def extractive(left: list[Item]) -> Callable[[int], tuple[str, int, list[Item]] | None]:
    def write(target: int) -> tuple[str, int, list[Item]] | None:
        got = digest([i.content for i in left], target, COUNT)
        if got is None:
            return None
        text, covered = got
        return text, COUNT(text), [left[n] for n in covered]

    return write


def summarized(f: Fitting, done: Assembly) -> Assembly:
    left = left_out(f.manifest)
    return place_summary(f, done, extractive(left), summary_room(f))


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(min_value=10, max_value=220),
    texts=st.lists(
        st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=4), min_size=1, max_size=12
    ),
    system=st.sampled_from([None, "sys.", "You are terse.\n"]),
    quota=st.none() | st.integers(min_value=0, max_value=40),
)
def test_a_summary_keeps_the_exact_count_within_the_budget_and_drops_nothing(
    budget: int, texts: list[list[str]], system: str | None, quota: int | None
) -> None:
    quotas = Quotas(session=quota, working_memory=quota, recall=quota)
    try:
        f, done = fitted(budget, texts, system=system, quotas=quotas)
    except InputTooLarge:  # the input alone does not fit: refused, as with drop
        return
    before = [(i.included, i.reason) for i in f.manifest]
    left = left_out(f.manifest)
    out = summarized(f, done)
    assert out.tokens == chat_tokens(COUNT, out.messages) <= budget
    *taken, summary = out.manifest
    assert [(i.included, i.reason) for i in taken] == before  # nothing taken away
    assert summary.source == "summary"
    assert all(c in left for c in summary.covers)
    if not summary.included:
        assert (summary.reason, summary.covers, out.messages) == ("budget", (), done.messages)
        assert out.tokens == done.tokens
        return
    assert summary.tokens == COUNT(summary.content) > 0
    system_text = out.messages[0]["content"]
    assert system_text.endswith(f"{SUMMARY_HEADER}{SEPARATOR}{summary.content}")
    # Every message but the system one is drop's.
    assert out.messages[1:] == done.messages[-len(out.messages) + 1 :]


def test_the_room_is_the_budget_less_the_prompt_with_an_empty_summary() -> None:
    texts = [[SENTENCES[0], SENTENCES[1]]] * 6
    f, done = fitted(60, texts, quotas=Quotas(session=0, working_memory=0, recall=0))
    assert [i.included for i in f.manifest] == [True] + [False] * 6
    assert done.messages == [
        {"role": "system", "content": "sys."},
        {"role": "user", "content": "hi"},
    ]
    empty = [{"role": "system", "content": f"sys.{SEPARATOR}{SUMMARY_HEADER}{SEPARATOR}"}]
    assert summary_room(f) == 60 - chat_tokens(COUNT, [*empty, done.messages[1]]) == 39
    assert len(f.manifest) == 7  # the probe is gone


def test_a_text_over_the_budget_is_written_again_shorter() -> None:
    # A write that always overshoots its target by 3: written again for less each time
    # (by its excess, at least one) until one fits.
    texts = [["One two three four five six seven eight nine ten eleven twelve."]] * 3
    f, done = fitted(60, texts, system=None, quotas=Quotas(session=0, working_memory=0, recall=0))
    left = left_out(f.manifest)
    room = summary_room(f)
    asked: list[int] = []

    def write(target: int) -> tuple[str, int, list[Item]]:
        asked.append(target)
        text = " ".join(["word"] * (target + 3))
        return text, COUNT(text), left[:1]

    out = place_summary(f, done, write, room)
    assert asked == [room, room - 1, room - 2, room - 3]
    summary = out.manifest[-1]
    assert (summary.included, summary.tokens, summary.covers) == (True, room, (left[0],))
    assert out.tokens == chat_tokens(COUNT, out.messages) == 60
    assert out.messages[0] == {
        "role": "system",
        "content": f"{SUMMARY_HEADER}{SEPARATOR}{' '.join(['word'] * room)}",
    }


def test_a_text_that_merges_into_fewer_tokens_is_written_again_longer() -> None:
    # A text starting with a newline merges with the blank line before it ("\n\n\n" is one
    # token): one token is left, so it is written again for one more.
    texts = [["One two three four five six seven eight nine ten eleven twelve."]] * 3
    f, done = fitted(60, texts, system=None, quotas=Quotas(session=0, working_memory=0, recall=0))
    left = left_out(f.manifest)
    room = summary_room(f)
    asked: list[int] = []

    def write(target: int) -> tuple[str, int, list[Item]]:
        asked.append(target)
        text = "\n" + " ".join(["word"] * (target - 1))
        assert COUNT(text) == target
        return text, target, left[:1]

    out = place_summary(f, done, write, room)
    assert asked == [room, room + 1]
    assert out.manifest[-1].tokens == room + 1
    assert out.tokens == chat_tokens(COUNT, out.messages) == 60


def test_no_room_no_write_and_the_entry_says_left_out_for_the_budget() -> None:
    texts = [["One two three four five six seven eight nine ten eleven twelve."]] * 3
    f, done = fitted(12, texts, system=None)
    assert summary_room(f) <= 0
    asked: list[int] = []

    def write(target: int) -> None:
        asked.append(target)

    out = place_summary(f, done, write, summary_room(f))
    assert asked == []
    assert (out.messages, out.tokens) == (done.messages, done.tokens)
    summary = out.manifest[-1]
    assert (summary.source, summary.included, summary.reason, summary.tokens, summary.covers) == (
        "summary", False, "budget", 0, ()
    )  # fmt: skip
