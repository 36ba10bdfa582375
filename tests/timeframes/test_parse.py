"""Timeframe parsing: every phrase family against fixed instants, with exact expected ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.timeframes.parse import ACCEPTED_FORMS, TimeframeError, TimeRange, parse_timeframe

NOW = datetime(2026, 11, 18, 15, 30, 45, tzinfo=UTC)  # a Wednesday
NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday, exactly at midnight
END_OF_MARCH = datetime(2024, 3, 31, 12, tzinfo=UTC)  # a leap year's March 31st
LEAP_DAY = datetime(2024, 2, 29, 12, tzinfo=UTC)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def check(text: str, now: datetime, expected: TimeRange) -> None:
    got = parse_timeframe(text, now)
    assert got == expected
    # Equal instants compare equal across zones, so pin the zone separately.
    for bound in (got.start, got.end):
        assert bound is None or bound.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-01", TimeRange(utc(2025, 3, 1), utc(2025, 3, 2))),
        ("2024-02-29", TimeRange(utc(2024, 2, 29), utc(2024, 3, 1))),
        ("2025-12-31", TimeRange(utc(2025, 12, 31), utc(2026, 1, 1))),
    ],
)
def test_iso_date_is_the_whole_utc_day(text: str, expected: TimeRange) -> None:
    check(text, NOW, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-01T10:00:00Z", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        ("2025-03-01T12:00:00+02:00", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        ("2025-03-01T12:00+0200", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        ("2025-03-01T23:30:00-01:00", TimeRange(utc(2025, 3, 2, 0, 30), utc(2025, 3, 2, 0, 30, 1))),
        ("2025-03-01T10:00", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        ("2025-03-01 10:00:00Z", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        ("2025-03-01t10:00:00z", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 0, 1))),
        (
            "2025-03-01T10:00:00.250Z",
            TimeRange(utc(2025, 3, 1, 10, 0, 0, 250000), utc(2025, 3, 1, 10, 0, 1, 250000)),
        ),
    ],
)
def test_iso_datetime_is_that_second_in_utc(text: str, expected: TimeRange) -> None:
    check(text, NOW, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # start/end: a date endpoint covers its whole day, a date-time stands for itself.
        ("2025-03-01/2025-03-31", TimeRange(utc(2025, 3, 1), utc(2025, 4, 1))),
        (
            "2025-03-01T10:00:00Z/2025-03-01T12:00:00Z",
            TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 12)),
        ),
        ("2025-03-01T10:00:00Z/2025-03-02", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 3))),
        ("2025-03-01/2025-03-01T06:00:00+02:00", TimeRange(utc(2025, 3, 1), utc(2025, 3, 1, 4))),
        ("2025-03-01 / 2025-03-02", TimeRange(utc(2025, 3, 1), utc(2025, 3, 3))),
        # start/duration
        ("2025-03-01/P1D", TimeRange(utc(2025, 3, 1), utc(2025, 3, 2))),
        ("2025-03-01/P1W", TimeRange(utc(2025, 3, 1), utc(2025, 3, 8))),
        ("2025-03-01T10:00:00Z/PT1H30M", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 11, 30))),
        ("2025-03-01T10:00:00Z/PT90S", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 10, 1, 30))),
        ("2025-03-01/P1Y2M3DT4H5M6S", TimeRange(utc(2025, 3, 1), utc(2026, 5, 4, 4, 5, 6))),
        ("2024-01-31/P1M", TimeRange(utc(2024, 1, 31), utc(2024, 2, 29))),
        ("2024-02-29/P1Y", TimeRange(utc(2024, 2, 29), utc(2025, 2, 28))),
        ("2025-03-01t10:00:00z/pt1h", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 11))),
        # duration/end
        ("P1D/2025-03-01", TimeRange(utc(2025, 3, 1), utc(2025, 3, 2))),
        ("PT2H/2025-03-01T12:00:00Z", TimeRange(utc(2025, 3, 1, 10), utc(2025, 3, 1, 12))),
        ("P1M/2024-03-31T00:00:00Z", TimeRange(utc(2024, 2, 29), utc(2024, 3, 31))),
        # Months first (Mar 31 → Feb 28), then the exact day.
        ("P1M1D/2025-03-31T00:00:00Z", TimeRange(utc(2025, 2, 27), utc(2025, 3, 31))),
    ],
)
def test_iso_intervals(text: str, expected: TimeRange) -> None:
    check(text, NOW, expected)


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("today", NOW, TimeRange(utc(2026, 11, 18), utc(2026, 11, 19))),
        ("yesterday", NOW, TimeRange(utc(2026, 11, 17), utc(2026, 11, 18))),
        ("today", NEW_YEAR, TimeRange(utc(2026, 1, 1), utc(2026, 1, 2))),
        ("yesterday", NEW_YEAR, TimeRange(utc(2025, 12, 31), utc(2026, 1, 1))),
        (
            "yesterday",
            datetime(2024, 3, 1, tzinfo=UTC),
            TimeRange(utc(2024, 2, 29), utc(2024, 3, 1)),
        ),
    ],
)
def test_today_and_yesterday_are_whole_utc_days(
    text: str, now: datetime, expected: TimeRange
) -> None:
    check(text, now, expected)


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("this week", NOW, TimeRange(utc(2026, 11, 16), utc(2026, 11, 23))),
        ("this month", NOW, TimeRange(utc(2026, 11, 1), utc(2026, 12, 1))),
        ("this year", NOW, TimeRange(utc(2026, 1, 1), utc(2027, 1, 1))),
        ("last week", NOW, TimeRange(utc(2026, 11, 9), utc(2026, 11, 16))),
        ("last month", NOW, TimeRange(utc(2026, 10, 1), utc(2026, 11, 1))),
        ("last year", NOW, TimeRange(utc(2025, 1, 1), utc(2026, 1, 1))),
        ("this week", NEW_YEAR, TimeRange(utc(2025, 12, 29), utc(2026, 1, 5))),
        ("this month", NEW_YEAR, TimeRange(utc(2026, 1, 1), utc(2026, 2, 1))),
        ("last week", NEW_YEAR, TimeRange(utc(2025, 12, 22), utc(2025, 12, 29))),
        ("last month", NEW_YEAR, TimeRange(utc(2025, 12, 1), utc(2026, 1, 1))),
        ("last year", NEW_YEAR, TimeRange(utc(2025, 1, 1), utc(2026, 1, 1))),
        ("last month", END_OF_MARCH, TimeRange(utc(2024, 2, 1), utc(2024, 3, 1))),
        # Sunday still belongs to the week that started on Monday.
        ("this week", END_OF_MARCH, TimeRange(utc(2024, 3, 25), utc(2024, 4, 1))),
    ],
)
def test_this_and_last_period_are_whole_calendar_periods(
    text: str, now: datetime, expected: TimeRange
) -> None:
    check(text, now, expected)


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("last 24 hours", NOW, TimeRange(utc(2026, 11, 17, 15, 30, 45), NOW)),
        ("last 3 days", NOW, TimeRange(utc(2026, 11, 15, 15, 30, 45), NOW)),
        ("last 1 day", NOW, TimeRange(utc(2026, 11, 17, 15, 30, 45), NOW)),
        ("last 30 minutes", NOW, TimeRange(utc(2026, 11, 18, 15, 0, 45), NOW)),
        ("last 1 minute", NOW, TimeRange(utc(2026, 11, 18, 15, 29, 45), NOW)),
        ("last 2 weeks", NOW, TimeRange(utc(2026, 11, 4, 15, 30, 45), NOW)),
        ("last 6 months", NOW, TimeRange(utc(2026, 5, 18, 15, 30, 45), NOW)),
        ("last 1 year", NOW, TimeRange(utc(2025, 11, 18, 15, 30, 45), NOW)),
        ("past 3 days", NOW, TimeRange(utc(2026, 11, 15, 15, 30, 45), NOW)),
        ("past 2 years", NOW, TimeRange(utc(2024, 11, 18, 15, 30, 45), NOW)),
        ("past hour", NOW, TimeRange(utc(2026, 11, 18, 14, 30, 45), NOW)),
        ("past day", NOW, TimeRange(utc(2026, 11, 17, 15, 30, 45), NOW)),
        ("past week", NOW, TimeRange(utc(2026, 11, 11, 15, 30, 45), NOW)),
        ("past year", NOW, TimeRange(utc(2025, 11, 18, 15, 30, 45), NOW)),
        ("last 24 hours", NEW_YEAR, TimeRange(utc(2025, 12, 31), NEW_YEAR)),
        # Calendar months clamp the day of the month.
        ("last 1 month", END_OF_MARCH, TimeRange(utc(2024, 2, 29, 12), END_OF_MARCH)),
        ("past month", END_OF_MARCH, TimeRange(utc(2024, 2, 29, 12), END_OF_MARCH)),
        ("last 13 months", END_OF_MARCH, TimeRange(utc(2023, 2, 28, 12), END_OF_MARCH)),
        ("last 1 year", LEAP_DAY, TimeRange(utc(2023, 2, 28, 12), LEAP_DAY)),
    ],
)
def test_last_and_past_n_units_roll_back_from_now(
    text: str, now: datetime, expected: TimeRange
) -> None:
    check(text, now, expected)


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("5 minutes ago", NOW, TimeRange(utc(2026, 11, 18, 15, 25), utc(2026, 11, 18, 15, 26))),
        ("1 hour ago", NOW, TimeRange(utc(2026, 11, 18, 14), utc(2026, 11, 18, 15))),
        ("2 hours ago", NOW, TimeRange(utc(2026, 11, 18, 13), utc(2026, 11, 18, 14))),
        ("1 day ago", NOW, TimeRange(utc(2026, 11, 17), utc(2026, 11, 18))),
        ("3 days ago", NOW, TimeRange(utc(2026, 11, 15), utc(2026, 11, 16))),
        ("1 week ago", NOW, TimeRange(utc(2026, 11, 9), utc(2026, 11, 16))),
        ("2 weeks ago", NOW, TimeRange(utc(2026, 11, 2), utc(2026, 11, 9))),
        ("1 month ago", NOW, TimeRange(utc(2026, 10, 1), utc(2026, 11, 1))),
        ("11 months ago", NOW, TimeRange(utc(2025, 12, 1), utc(2026, 1, 1))),
        ("12 months ago", NOW, TimeRange(utc(2025, 11, 1), utc(2025, 12, 1))),
        ("2 years ago", NOW, TimeRange(utc(2024, 1, 1), utc(2025, 1, 1))),
        ("1 hour ago", NEW_YEAR, TimeRange(utc(2025, 12, 31, 23), NEW_YEAR)),
        ("1 day ago", NEW_YEAR, TimeRange(utc(2025, 12, 31), NEW_YEAR)),
        ("1 month ago", NEW_YEAR, TimeRange(utc(2025, 12, 1), NEW_YEAR)),
        ("1 month ago", END_OF_MARCH, TimeRange(utc(2024, 2, 1), utc(2024, 3, 1))),
        ("1 year ago", END_OF_MARCH, TimeRange(utc(2023, 1, 1), utc(2024, 1, 1))),
    ],
)
def test_n_units_ago_is_that_whole_calendar_unit(
    text: str, now: datetime, expected: TimeRange
) -> None:
    check(text, now, expected)


@pytest.mark.parametrize("text", ["recent", "recently", " Recently "])
def test_recent_is_the_last_seven_days(text: str) -> None:
    check(text, NOW, TimeRange(utc(2026, 11, 11, 15, 30, 45), NOW))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("since 2025-01-01", TimeRange(utc(2025, 1, 1), None)),
        ("since 2025-03-01T10:00:00Z", TimeRange(utc(2025, 3, 1, 10), None)),
        ("since yesterday", TimeRange(utc(2026, 11, 17), None)),
        ("since last week", TimeRange(utc(2026, 11, 9), None)),
        ("since 3 days ago", TimeRange(utc(2026, 11, 15), None)),
        ("since last 2 hours", TimeRange(utc(2026, 11, 18, 13, 30, 45), None)),
        ("after 2025-01-01", TimeRange(utc(2025, 1, 2), None)),
        ("after 2025-03-01T10:00:00Z", TimeRange(utc(2025, 3, 1, 10, 0, 1), None)),
        ("after yesterday", TimeRange(utc(2026, 11, 18), None)),
        ("after last month", TimeRange(utc(2026, 11, 1), None)),
        ("after 2025-03-01/P1M", TimeRange(utc(2025, 4, 1), None)),
        ("before 2025-01-01", TimeRange(None, utc(2025, 1, 1))),
        ("before today", TimeRange(None, utc(2026, 11, 18))),
        ("before this year", TimeRange(None, utc(2026, 1, 1))),
        ("before last 3 days", TimeRange(None, utc(2026, 11, 15, 15, 30, 45))),
    ],
)
def test_since_after_before_take_a_bound_of_any_span(text: str, expected: TimeRange) -> None:
    check(text, NOW, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("between 2025-01-01 and yesterday", TimeRange(utc(2025, 1, 1), utc(2026, 11, 18))),
        ("between 2025-01-01 and 2025-01-31", TimeRange(utc(2025, 1, 1), utc(2025, 2, 1))),
        ("between last month and today", TimeRange(utc(2026, 10, 1), utc(2026, 11, 19))),
        ("between 3 days ago and yesterday", TimeRange(utc(2026, 11, 15), utc(2026, 11, 18))),
        ("between yesterday and yesterday", TimeRange(utc(2026, 11, 17), utc(2026, 11, 18))),
        ("between 2025-03-01/P1D and 2025-03-05/P1D", TimeRange(utc(2025, 3, 1), utc(2025, 3, 6))),
        ("from last week to this week", TimeRange(utc(2026, 11, 9), utc(2026, 11, 23))),
        (
            "from 2025-01-01 to 2025-03-01T10:00:00Z",
            TimeRange(utc(2025, 1, 1), utc(2025, 3, 1, 10, 0, 1)),
        ),
    ],
)
def test_between_and_from_to_run_from_start_of_first_to_end_of_second(
    text: str, expected: TimeRange
) -> None:
    check(text, NOW, expected)


@pytest.mark.parametrize(
    ("text", "same_as"),
    [
        ("  TODAY  ", "today"),
        ("Last   Week", "last week"),
        ("\tlast 3\nDAYS ", "last 3 days"),
        ("BETWEEN 2025-01-01 AND Yesterday", "between 2025-01-01 and yesterday"),
        ("Since  Last  Month", "since last month"),
        ("2 Hours Ago", "2 hours ago"),
        # Word numbers one…twelve read like digits.
        ("last two weeks", "last 2 weeks"),
        ("past three days", "past 3 days"),
        ("one day ago", "1 day ago"),
        ("Five Hours Ago", "5 hours ago"),
        ("twelve months ago", "12 months ago"),
        ("last eleven years", "last 11 years"),
    ],
)
def test_case_whitespace_and_word_numbers_do_not_matter(text: str, same_as: str) -> None:
    assert parse_timeframe(text, NOW) == parse_timeframe(same_as, NOW)


def test_calendar_arithmetic_uses_utc_whatever_the_zone_of_now() -> None:
    evening_in_new_york = datetime(2026, 11, 18, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    check("today", evening_in_new_york, TimeRange(utc(2026, 11, 19), utc(2026, 11, 20)))
    check(
        "last 1 hour",
        evening_in_new_york,
        TimeRange(utc(2026, 11, 19, 3, 30), utc(2026, 11, 19, 4, 30)),
    )


@pytest.mark.parametrize(
    "text",
    [
        "next week",
        "tomorrow",
        "last fortnight",
        "thirteen days ago",
        "last -3 days",
        "",
        "   ",
        "since",
        "between 2025-01-01",
        "P1D",
        "P1D/P2D",
        "P/2025-03-01",
        "2025-03-01/PT",
        "2025-03-01/P1DT",
        "2025-03-01/2025-03-02/2025-03-03",
        "2025/03/01",
        "20250301",
    ],
)
def test_unknown_text_is_named_and_accepted_forms_listed(text: str) -> None:
    with pytest.raises(TimeframeError) as info:
        parse_timeframe(text, NOW)
    assert isinstance(info.value, ValueError)
    assert repr(text) in info.value.message
    assert all(form in info.value.message for form in ACCEPTED_FORMS)
    assert info.value.accepted == ACCEPTED_FORMS


def test_unknown_part_of_a_compound_is_pointed_out() -> None:
    with pytest.raises(TimeframeError) as info:
        parse_timeframe("between 2025-01-01 and blah", NOW)
    assert info.value.message.startswith(
        "unrecognised timeframe 'between 2025-01-01 and blah' (cannot read 'blah'); accepted forms:"
    )


def test_naive_now_is_rejected() -> None:
    with pytest.raises(TimeframeError, match="timezone-aware"):
        parse_timeframe("today", datetime(2026, 11, 18, 15, 30))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("between today and yesterday", "is empty"),
        ("from 2025-02-01 to 2025-01-01", "is empty"),
        ("between 2025-01-02 and 2025-01-01", "is empty"),
        ("2025-03-02/2025-03-01", "is empty"),
        ("2025-03-01T10:00:00Z/2025-03-01T10:00:00Z", "is empty"),
        ("2025-03-01/P0D", "is empty"),
        ("2025-03-01T10:00:00Z/PT0S", "is empty"),
        ("last 0 days", "at least 1"),
        ("past 0 hours", "at least 1"),
        ("0 days ago", "at least 1"),
        ("since last 0 weeks", "at least 1"),
        ("2025-02-30", "not a valid date or is out of range"),
        ("2025-13-01", "not a valid date or is out of range"),
        ("2025-03-01T25:00:00Z", "not a valid date or is out of range"),
        ("last 99999 years", "not a valid date or is out of range"),
        ("last 999999999999 days", "not a valid date or is out of range"),
        ("9998-12-31/P2Y", "not a valid date or is out of range"),
        ("9999-12-31/P1D", "out of range: instants are from 1900-01-01"),
        ("since 1899-12-31", "out of range: instants are from 1900-01-01"),
        ("0001-01-01T00:00:00+05:00", "out of range: instants are from 1900-01-01"),
        ("before 9999-12-31T23:00:00-05:00", "out of range: instants are from 1900-01-01"),
    ],
)
def test_empty_impossible_and_out_of_range_timeframes_are_rejected(text: str, reason: str) -> None:
    with pytest.raises(TimeframeError, match=reason) as info:
        parse_timeframe(text, NOW)
    assert info.value.accepted == ACCEPTED_FORMS


@given(
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    )
)
def test_calendar_periods_contain_now_and_tile_with_their_predecessors(now: datetime) -> None:
    for current, previous in [
        ("today", "yesterday"),
        ("this week", "last week"),
        ("this month", "last month"),
        ("this year", "last year"),
    ]:
        this, last = parse_timeframe(current, now), parse_timeframe(previous, now)
        assert this.start is not None and this.end is not None
        assert this.start <= now < this.end
        assert last.end == this.start
    assert parse_timeframe("this week", now).start.weekday() == 0  # type: ignore[union-attr]
    assert parse_timeframe("1 day ago", now) == parse_timeframe("yesterday", now)
    assert parse_timeframe("1 month ago", now) == parse_timeframe("last month", now)


@given(
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    st.integers(min_value=1, max_value=5000),
)
def test_rolling_days_and_hours_end_now_and_span_exactly_n(now: datetime, n: int) -> None:
    assert parse_timeframe(f"last {n} days", now) == TimeRange(now - timedelta(days=n), now)
    assert parse_timeframe(f"past {n} hours", now) == TimeRange(now - timedelta(hours=n), now)
