"""The maintenance schedule's cron expressions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.maintenance.cron import CronError, parse


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "after", "now", "due"),
    [
        ("30 3 * * *", at(2026, 11, 26, 3, 29), at(2026, 11, 26, 3, 30), True),
        ("30 3 * * *", at(2026, 11, 26, 3, 30), at(2026, 11, 27, 3, 29), False),
        ("30 3 * * *", at(2026, 11, 26, 3, 30), at(2026, 11, 27, 3, 30, 59), True),
        ("*/15 * * * *", at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 14), False),
        ("*/15 * * * *", at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 15), True),
        ("0 0 1 * *", at(2026, 1, 1, 0, 0), at(2026, 1, 31, 23, 59), False),
        ("0 0 1 * *", at(2026, 1, 1, 0, 0), at(2026, 2, 1, 0, 0), True),
        # 2026-11-29 is a Sunday (0 and 7)
        ("0 12 * * 0", at(2026, 11, 26), at(2026, 11, 29, 11, 59), False),
        ("0 12 * * 7", at(2026, 11, 26), at(2026, 11, 29, 12, 0), True),
        ("0 12 * * 1-5", at(2026, 11, 28), at(2026, 11, 29, 23, 0), False),  # the weekend
        # both day fields restricted: either one (the 1st, or a Friday: 2026-11-27)
        ("0 9 1 * 5", at(2026, 11, 26, 10), at(2026, 11, 27, 9), True),
        ("0 9 1,15 2 *", at(2026, 1, 1), at(2026, 12, 31), True),
        ("0 9 30 2 *", at(2026, 1, 1), at(2026, 12, 31), False),  # no February 30th
    ],
)
def test_due_names_a_minute_in_the_window(expr: str, after, now, due: bool) -> None:
    assert parse(expr).due(after, now) is due


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("* * * *", "5 fields"),
        ("60 * * * *", "minute: '60' is outside 0-59"),
        ("* 24 * * *", "hour: '24' is outside 0-23"),
        ("* * 0 * *", "day of month: '0' is outside 1-31"),
        ("* * * 13 *", "month: '13' is outside 1-12"),
        ("* * * * 8", "day of week: '8' is outside 0-7"),
        ("*/0 * * * *", "minute: bad step '*/0'"),
        ("5-1 * * * *", "minute: '5-1' is outside 0-59"),
        ("mon * * * *", "minute: 'mon' is not a number, range or *"),
    ],
)
def test_a_bad_expression_says_which_field(expr: str, says: str) -> None:
    with pytest.raises(CronError, match=None) as e:
        parse(expr)
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("expr", "never"),
    [
        ("0 0 30 2 *", True),
        ("0 0 31 2,4,6,9,11 *", True),
        ("0 0 29 2 *", False),  # leap years
        ("0 0 31 2 5", False),  # both day fields restricted: every Friday of February
        ("0 0 31 * *", False),
        ("0 0 * 2 *", False),
        ("0 0 * * 3", False),
    ],
)
def test_never_fires_when_no_date_matches(expr: str, never: bool) -> None:
    assert parse(expr).never_fires() is never
