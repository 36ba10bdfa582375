"""Timeframes: ISO-8601 and natural phrases turned into half-open UTC ranges.

Everything is evaluated against an explicit, timezone-aware `now`, and all calendar arithmetic
(days, Monday-based weeks, months, years) happens in UTC: "today" for a client in UTC-5 at 23:00
local time is already tomorrow. Input is case-insensitive and runs of whitespace count as one.

Grammar::

    timeframe := span | ("since" | "after" | "before") span
               | "between" span "and" span | "from" span "to" span
    span      := iso-date | iso-date-time | iso-interval
               | "today" | "yesterday" | "recent" | "recently"
               | ("this" | "last") ("week" | "month" | "year")
               | ("last" | "past") count unit | "past" unit | count unit "ago"
    unit      := ("minute" | "hour" | "day" | "week" | "month" | "year") ["s"]
    count     := digits | "one" … "twelve"          (at least 1)

Every span is a bounded range [start, end):

    2025-03-01                  the whole UTC day [00:00, next 00:00)
    2025-03-01T10:00:00+02:00   that second [X, X + 1 s); no offset means UTC
    A/B                         [A, B); a date endpoint covers its whole day
    A/D, D/B                    [A, A + D), [B - D, B); D = PnYnMnWnDTnHnMnS
    today, yesterday            the current, previous UTC day
    this week|month|year        the current calendar period, up to the start of the next one
    last week|month|year        the previous calendar period
    N units ago                 the whole calendar unit N units back ("3 days ago": that day)
    last|past N units           rolling [now - N units, now); "past unit" means N = 1
    recent, recently            rolling [now - 7 days, now)

and the operators take its bounds: since X = [start X, None), after X = [end X, None),
before X = [None, start X), between X and Y = from X to Y = [start X, end Y).
Months and years move by calendar months, clamping the day (2024-03-31 minus a month is
2024-02-29); inside a duration the months and years apply first, then the exact part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from app.common import INSTANT_RANGE, in_instant_range

__all__ = ["ACCEPTED_FORMS", "TimeRange", "TimeframeError", "add_months", "parse_timeframe"]


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Half-open [start, end) in UTC; None leaves that side unbounded."""

    start: datetime | None
    end: datetime | None


ACCEPTED_FORMS: list[str] = [
    "ISO-8601 date, e.g. 2025-03-01 (that whole UTC day)",
    "ISO-8601 date-time, e.g. 2025-03-01T10:00:00Z or 2025-03-01T12:00+02:00 (that second)",
    "ISO-8601 interval: start/end, start/duration or duration/end, e.g. 2025-03-01/P1M2DT3H",
    "today, yesterday",
    "this week|month|year, last week|month|year (calendar periods; weeks start on Monday)",
    "last|past N minutes|hours|days|weeks|months|years, past minute|hour|…|year (up to now)",
    "N minutes|hours|days|weeks|months|years ago (that whole minute, hour, day, …)",
    "recent, recently (the last 7 days)",
    "since X, after X, before X, between X and Y, from X to Y (X, Y: any form above)",
    "N is a number from 1 or a word one…twelve; all calendar arithmetic is in UTC",
]


class TimeframeError(ValueError):
    """A timeframe that cannot be understood; `accepted` lists what can."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.accepted = list(ACCEPTED_FORMS)


class _Unrecognised(Exception):
    """Internal: the fragment of the input that matched no form."""

    def __init__(self, fragment: str) -> None:
        super().__init__(fragment)
        self.fragment = fragment


_Span = tuple[datetime, datetime]

_WORDS = ("one two three four five six seven eight nine ten eleven twelve").split()
_NUMBERS = {word: n for n, word in enumerate(_WORDS, start=1)}
_COUNT = rf"([0-9]+|{'|'.join(_WORDS)})"
_UNIT = r"(minute|hour|day|week|month|year)s?"

_OPEN = re.compile(r"(since|after|before) (.+)")
_BETWEEN = re.compile(r"between (.+?) and (.+)")
_FROM_TO = re.compile(r"from (.+?) to (.+)")
_PERIOD = re.compile(r"(this|last) (week|month|year)")
_ROLLING = re.compile(rf"(?:last|past) {_COUNT} {_UNIT}")
_PAST_ONE = re.compile(rf"past {_UNIT}")
_AGO = re.compile(rf"{_COUNT} {_UNIT} ago")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[t ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?"
    r"(?:z|[+-][0-9]{2}(?::?[0-9]{2})?)?"
)
# The lookaheads reject a bare "P" and a "T" with no time part after it.
_DURATION = re.compile(
    r"p(?!$)(?:([0-9]+)y)?(?:([0-9]+)m)?(?:([0-9]+)w)?(?:([0-9]+)d)?"
    r"(?:t(?=[0-9])(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?)?"
)


def parse_timeframe(text: str, now: datetime) -> TimeRange:
    """Parse `text` into a half-open UTC range, evaluated against the aware instant `now`."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise TimeframeError(f"now must be timezone-aware, got the naive {now.isoformat()}")
    if not in_instant_range(now):
        raise TimeframeError(f"now must be from {INSTANT_RANGE}, got {now.isoformat()}")
    phrase = " ".join(text.split()).lower()
    try:
        return _timeframe(phrase, now.astimezone(UTC))
    except _Unrecognised as exc:
        where = "" if exc.fragment == phrase else f" (cannot read {exc.fragment!r})"
        raise TimeframeError(
            f"unrecognised timeframe {text!r}{where}; accepted forms: " + "; ".join(ACCEPTED_FORMS)
        ) from None
    except TimeframeError:
        raise
    except (ValueError, OverflowError) as exc:
        # Impossible dates (2025-02-30) and arithmetic past year 1 or 9999 end up here.
        raise TimeframeError(f"timeframe {text!r} is not a valid date or is out of range") from exc


def _timeframe(phrase: str, now: datetime) -> TimeRange:
    if m := _OPEN.fullmatch(phrase):
        start, end = _span(m[2], now)
        if m[1] == "since":
            return TimeRange(start, None)
        return TimeRange(end, None) if m[1] == "after" else TimeRange(None, start)
    if m := _BETWEEN.fullmatch(phrase) or _FROM_TO.fullmatch(phrase):
        start, end = _span(m[1], now)[0], _span(m[2], now)[1]
        if start >= end:
            raise TimeframeError(
                f"timeframe {phrase!r} is empty: it starts at {start.isoformat()},"
                f" not before its end at {end.isoformat()}"
            )
        return TimeRange(start, end)
    return TimeRange(*_span(phrase, now))


def _span(s: str, now: datetime) -> _Span:
    if s == "today":
        return _calendar(now, "day", 0)
    if s == "yesterday":
        return _calendar(now, "day", 1)
    if s in ("recent", "recently"):
        return now - timedelta(days=7), now
    if m := _PERIOD.fullmatch(s):
        return _calendar(now, m[2], 0 if m[1] == "this" else 1)
    if m := _ROLLING.fullmatch(s):
        return _shift(now, m[2], -_count(m[1], s)), now
    if m := _PAST_ONE.fullmatch(s):
        return _shift(now, m[1], -1), now
    if m := _AGO.fullmatch(s):
        return _calendar(now, m[2], _count(m[1], s))
    if "/" in s:
        return _interval(s)
    if point := _iso(s):
        start, is_date = point
        return start, start + (timedelta(days=1) if is_date else timedelta(seconds=1))
    raise _Unrecognised(s)


def _count(token: str, s: str) -> int:
    n = _NUMBERS.get(token) or int(token)
    if n < 1:
        raise TimeframeError(f"the count in {s!r} must be at least 1")
    return n


def _calendar(now: datetime, unit: str, back: int) -> _Span:
    """The whole calendar `unit` that lies `back` units before the one containing `now`."""
    start = _shift(_floor(now, unit), unit, -back)
    return start, _shift(start, unit, 1)


def _floor(dt: datetime, unit: str) -> datetime:
    if unit == "minute":
        return dt.replace(second=0, microsecond=0)
    if unit == "hour":
        return dt.replace(minute=0, second=0, microsecond=0)
    day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    if unit == "year":
        return day.replace(month=1, day=1)
    return day


def _shift(dt: datetime, unit: str, n: int) -> datetime:
    if unit == "month":
        return add_months(dt, n)
    if unit == "year":
        return add_months(dt, 12 * n)
    return dt + timedelta(**{unit + "s": n})


def add_months(dt: datetime, months: int) -> datetime:
    year, month = divmod(dt.year * 12 + dt.month - 1 + months, 12)
    month += 1
    last_day = 31 if month == 12 else (date(year, month + 1, 1) - timedelta(days=1)).day
    return dt.replace(year=year, month=month, day=min(dt.day, last_day))


def _interval(s: str) -> _Span:
    left, _, right = (part.strip() for part in s.partition("/"))
    if left_duration := _duration(left):
        end = _endpoint(right, s, is_end=True)
        months, exact = left_duration
        start = add_months(end, -months) - exact
    elif right_duration := _duration(right):
        start = _endpoint(left, s, is_end=False)
        months, exact = right_duration
        end = add_months(start, months) + exact
    else:
        start, end = _endpoint(left, s, is_end=False), _endpoint(right, s, is_end=True)
    if start >= end:
        raise TimeframeError(f"interval {s!r} is empty: its start is not before its end")
    return start, end


def _endpoint(x: str, interval: str, *, is_end: bool) -> datetime:
    """An interval bound: a date-time stands for itself, a date for its whole day."""
    point = _iso(x)
    if point is None:
        raise _Unrecognised(interval)
    instant, is_date = point
    return instant + timedelta(days=1) if is_end and is_date else instant


def _duration(s: str) -> tuple[int, timedelta] | None:
    """(calendar months, exact part) of an ISO-8601 duration, or None if `s` is not one."""
    m = _DURATION.fullmatch(s)
    if m is None:
        return None
    years, months, weeks, days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    exact = timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    return 12 * years + months, exact


def _iso(s: str) -> tuple[datetime, bool] | None:
    """(UTC instant, is_date) of an ISO-8601 date or date-time, or None if `s` is neither."""
    if _DATE.fullmatch(s):
        instant, is_date = datetime.fromisoformat(s).replace(tzinfo=UTC), True
    elif _DATETIME.fullmatch(s):
        dt = datetime.fromisoformat(s.upper())
        instant, is_date = (dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt), False
    else:
        return None
    # Checked before moving it to UTC, which overflows at the ends of year 1 and 9999.
    if not in_instant_range(instant):
        raise TimeframeError(f"{s!r} is out of range: instants are from {INSTANT_RANGE}")
    return instant.astimezone(UTC), is_date
