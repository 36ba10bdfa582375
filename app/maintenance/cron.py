"""Cron expressions, five fields in UTC (minute hour day-of-month month day-of-week), pure:
`*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists `a,b`, fields apart by spaces or
tabs; day-of-week 0-7 (0 and 7: Sunday). As in Vixie cron, when both day fields are
restricted a day matching either is due. An expression that names no existing date
(`0 0 30 2 *`: February 30th) parses, and `never_fires` says so: a schedule is refused with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES = ("minute", "hour", "day of month", "month", "day of week")
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit also takes "²" and "٣"
_SPACE = re.compile(r"[ \t]+")

# The grammar as one regular expression, for the schema: each field's numbers within its
# bounds (leading zeros allowed, as int() takes them). What it cannot say, a range's order
# (5-1) and a date that exists, `parse` and `never_fires` check.
_NUMBERS = (
    "[1-5]?[0-9]",
    "1?[0-9]|2[0-3]",
    "[1-9]|[12][0-9]|3[01]",
    "[1-9]|1[0-2]",
    "[0-7]",
)


def _field_pattern(numbers: str) -> str:
    n = f"0*(?:{numbers})"
    item = f"(?:\\*|{n}(?:-{n})?)(?:/0*[1-9][0-9]*)?"
    return f"{item}(?:,{item})*"


PATTERN = r"^[ \t]*" + r"[ \t]+".join(_field_pattern(n) for n in _NUMBERS) + r"[ \t]*$"
# Four years, a leap year among them: every (month, day) that exists, on every weekday.
_CYCLE_START = date(2024, 1, 1)
_CYCLE_DAYS = 4 * 365 + 1


class CronError(ValueError):
    pass


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is `*`
    any_weekday: bool  # day of week is `*`

    def day_matches(self, d: datetime) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def never_fires(self) -> bool:
        """Whether no date matches (the days named exist in none of the months named). Every
        field keeps at least one value, so a matching date has a matching minute."""
        for n in range(_CYCLE_DAYS):
            d = _CYCLE_START + timedelta(days=n)
            if self.day_matches(datetime(d.year, d.month, d.day, tzinfo=UTC)):
                return False
        return True

    def due(self, after: datetime, now: datetime) -> bool:
        """Whether a minute the expression names falls in (after, now]."""
        start = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        end = now.astimezone(UTC)
        day = start.replace(hour=0, minute=0)
        while day <= end:
            if self.day_matches(day):
                for h in sorted(self.hours):
                    for m in sorted(self.minutes):
                        t = day.replace(hour=h, minute=m)
                        if start <= t <= end:
                            return True
            day += timedelta(days=1)
        return False


def _field(text: str, index: int) -> frozenset[int]:
    lo, hi = _BOUNDS[index]
    out: set[int] = set()
    for item in text.split(","):
        body, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not _DIGITS.fullmatch(step_text) or int(step_text) == 0:
                raise CronError(f"{_NAMES[index]}: bad step {item!r}")
            step = int(step_text)
        if body == "*":
            a, b = lo, hi
        else:
            first, dash, last = body.partition("-")
            if not _DIGITS.fullmatch(first) or (dash and not _DIGITS.fullmatch(last)):
                raise CronError(f"{_NAMES[index]}: {item!r} is not a number, range or *")
            a, b = int(first), int(last) if dash else int(first)
            if step_text and not dash:
                b = hi
        if not lo <= a <= b <= hi:
            raise CronError(f"{_NAMES[index]}: {item!r} is outside {lo}-{hi}")
        out.update(range(a, b + 1, step))
    return frozenset(out)


def parse(expression: str) -> Cron:
    parts = _SPACE.split(expression.strip(" \t"))
    if len(parts) != 5:
        raise CronError(
            f"a cron expression has 5 fields (minute hour day month weekday), not {len(parts)}"
        )
    fields = [_field(p, i) for i, p in enumerate(parts)]
    weekdays = frozenset(d % 7 for d in fields[4])
    return Cron(
        fields[0], fields[1], fields[2], fields[3], weekdays, parts[2] == "*", parts[4] == "*"
    )
