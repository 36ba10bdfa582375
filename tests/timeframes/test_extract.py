"""timeframe "auto": the phrase found in a question, per phrase family, at a frozen now."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.timeframes.extract import extract_timeframe

NOW = datetime(2026, 2, 18, 15, 30, tzinfo=UTC)  # a Wednesday


def d(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("question", "phrase", "start", "end", "searched"),
    [
        # the parser's spans
        ("What did we decide last week about the schema?", "last week",
         d(2026, 2, 9), d(2026, 2, 16), "What did we decide about the schema?"),
        ("what changed today", "today", d(2026, 2, 18), d(2026, 2, 19), "what changed"),
        ("Yesterday, who called?", "Yesterday", d(2026, 2, 17), d(2026, 2, 18), "who called?"),
        ("what did I read this month", "this month", d(2026, 2, 1), d(2026, 3, 1),
         "what did I read"),
        ("deploys in the last 3 days", "in the last 3 days", d(2026, 2, 15, 15, 30), NOW,
         "deploys"),
        ("errors over the past two hours", "over the past two hours",
         d(2026, 2, 18, 13, 30), NOW, "errors"),
        ("What did I buy two weeks ago?", "two weeks ago", d(2026, 2, 2), d(2026, 2, 9),
         "What did I buy?"),
        ("who did I meet a month ago", "a month ago", d(2026, 1, 1), d(2026, 2, 1),
         "who did I meet"),
        ("what's new recently?", "recently", d(2026, 2, 11, 15, 30), NOW, "what's new?"),
        ("notes on 2025-03-01 about pottery", "on 2025-03-01", d(2025, 3, 1), d(2025, 3, 2),
         "notes about pottery"),
        # operators
        ("what changed since 2025-12-01?", "since 2025-12-01", d(2025, 12, 1), None,
         "what changed?"),
        ("bugs before last month", "before last month", None, d(2026, 1, 1), "bugs"),
        ("trips between January and yesterday", "between January and yesterday",
         d(2026, 1, 1), d(2026, 2, 18), "trips"),
        ("plans from March 2025 to June 2025", "from March 2025 to June 2025",
         d(2025, 3, 1), d(2025, 7, 1), "plans"),
        # months
        ("What did Leo do in March?", "in March", d(2025, 3, 1), d(2025, 4, 1),
         "What did Leo do?"),
        ("What did Leo do in February?", "in February", d(2026, 2, 1), d(2026, 3, 1),
         "What did Leo do?"),
        ("What did Leo do last February?", "last February", d(2025, 2, 1), d(2025, 3, 1),
         "What did Leo do?"),
        ("What did Leo do in January 2025?", "in January 2025", d(2025, 1, 1), d(2025, 2, 1),
         "What did Leo do?"),
        ("Mia's trip during May", "during May", d(2025, 5, 1), d(2025, 6, 1), "Mia's trip"),
        # seasons
        ("what happened last summer", "last summer", d(2025, 6, 1), d(2025, 9, 1),
         "what happened"),
        ("what happened last winter", "last winter", d(2024, 12, 1), d(2025, 3, 1),
         "what happened"),
        ("our plans this winter", "this winter", d(2025, 12, 1), d(2026, 3, 1), "our plans"),
        ("Where did Mia go during the summer of 2024?", "during the summer of 2024",
         d(2024, 6, 1), d(2024, 9, 1), "Where did Mia go?"),
        ("hikes in the fall", "in the fall", d(2025, 9, 1), d(2025, 12, 1), "hikes"),
        # years
        ("what did we ship in 2025?", "in 2025", d(2025, 1, 1), d(2026, 1, 1),
         "what did we ship?"),
    ],
)  # fmt: skip
def test_each_phrase_family_is_found_resolved_and_taken_out(
    question: str, phrase: str, start: datetime | None, end: datetime | None, searched: str
) -> None:
    found = extract_timeframe(question, NOW)
    assert found is not None
    assert (found.phrase, found.range.start, found.range.end, found.searched) == (
        phrase,
        start,
        end,
        searched,
    )


@pytest.mark.parametrize(
    "question",
    [
        "Who mentioned INC-48213?",
        "What may Mia bring to the party?",  # "may" the verb
        "Did the leaves fall?",
        "Summer is Mia's favourite season",  # a bare season, no preposition
        "ticket 2025 is closed",  # a bare number
        "what is the recent-ish plan",  # not a word of its own
        "the 2025-02-30 release",  # not a date
        "",
    ],
)
def test_a_question_without_a_time_phrase_is_left_unchanged(question: str) -> None:
    assert extract_timeframe(question, NOW) is None


def test_only_the_first_phrase_is_taken() -> None:
    found = extract_timeframe("what did we do yesterday and last week", NOW)
    assert found is not None
    assert (found.phrase, found.searched) == ("yesterday", "what did we do and last week")


def test_a_question_that_is_only_a_phrase_searches_the_whole_question() -> None:
    found = extract_timeframe("last week", NOW)
    assert found is not None
    assert (found.range.start, found.searched) == (d(2026, 2, 9), "last week")
