"""`timeframe: "auto"`: the time phrase in a question, taken out and turned into a range.

"What did we decide last week about the schema?" searches "What did we decide about the
schema?" within last week. A phrase is found on word boundaries, case-insensitively; the
first (leftmost, then longest) wins, and only one is taken. Recognised:

- every span the timeframe parser accepts (parse.py): today, yesterday, recently, this|last
  week|month|year, last|past N units, past unit, N units ago, ISO-8601 dates and date-times;
  also "a|an unit ago" (= 1);
- months: "in|during|since|... March", "March 2025", "last March", "this March";
- seasons (meteorological, northern hemisphere: spring = March-May, summer = June-August,
  autumn|fall = September-November, winter = December-February): "last summer", "this
  winter", "in the spring", "summer 2025", "the winter of 2024" (that December to February);
- years: "in|during|since|... 2025";
- with the operators: since|after|before X, between X and Y, from X to Y, and in|during|on|
  over [the] X (the preposition goes with the phrase).

A bare month, season or year needs a preposition or operator ("may" and "fall" are verbs, and
"2025" may be a ticket number). A month, season or year without a year number means the
latest one that has begun by `now` ("in March" in February 2026 is March 2025); "last X"
means the latest that has ended. When nothing but the phrase is left, the whole question is
searched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from app.timeframes.parse import TimeframeError, TimeRange, add_months, parse_timeframe

__all__ = ["AutoTimeframe", "extract_timeframe"]


@dataclass(frozen=True, slots=True)
class AutoTimeframe:
    phrase: str  # as written in the question
    range: TimeRange
    searched: str  # the question without the phrase


_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # first month
_WORD_COUNT = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_UNIT = r"(?:minute|hour|day|week|month|year)s?"
_MONTH = "|".join(_MONTHS)
_SEASON = "|".join(_SEASONS)
_YEAR = r"(?:19|20)[0-9]{2}"

# Spans that stand alone in a sentence, and those that need a preposition before them.
_ALONE = "|".join(
    [
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
        r"(?:[t ][0-9]{2}:[0-9]{2}(?::[0-9]{2})?(?:z|[+-][0-9]{2}:?[0-9]{2})?)?",
        r"(?:this|last) (?:week|month|year)",
        rf"(?:last|past) (?:[0-9]+|{_WORD_COUNT}) {_UNIT}",
        rf"past {_UNIT}",
        rf"(?:[0-9]+|{_WORD_COUNT}|an?) {_UNIT} ago",
        r"today|yesterday|recently",
        rf"(?:last|this) (?:{_MONTH}|{_SEASON})",
        rf"(?:{_MONTH}),? {_YEAR}",
        rf"(?:the )?(?:{_SEASON}) (?:of )?{_YEAR}",
    ]
)
_AFTER_PREPOSITION = rf"{_ALONE}|(?:{_MONTH})|(?:the )?(?:{_SEASON})|{_YEAR}"

_B = r"(?<![\w-])"  # word boundaries that keep "2025-03" and "re-cent" whole
_E = r"(?![\w-])"
_PATTERN = re.compile(
    "|".join(
        [
            rf"{_B}(?P<op2>between|from) (?P<a>{_AFTER_PREPOSITION}) (?:and|to) "
            rf"(?P<b>{_AFTER_PREPOSITION}){_E}",
            rf"{_B}(?P<op>since|after|before) (?P<x>{_AFTER_PREPOSITION}){_E}",
            rf"{_B}(?:in|during|on|over) (?:the )?(?P<y>{_AFTER_PREPOSITION}){_E}",
            rf"{_B}(?P<z>{_ALONE}){_E}",
        ]
    )
)


def extract_timeframe(question: str, now: datetime) -> AutoTimeframe | None:
    """The first time phrase in `question` as a range evaluated at `now`, or None."""
    lowered = question.lower()  # str.lower keeps offsets for the text a question holds
    if len(lowered) != len(question):
        return None
    for m in _PATTERN.finditer(lowered):
        try:
            found = _resolve(m, now.astimezone(UTC))
        except (TimeframeError, ValueError, OverflowError):
            continue  # "2025-02-30" and the like: not a time phrase after all
        searched = _without(question, m.start(), m.end())
        return AutoTimeframe(question[m.start() : m.end()], found, searched or question)
    return None


def _resolve(m: re.Match[str], now: datetime) -> TimeRange:
    if m["op2"]:
        (start, _), (_, end) = _span(m["a"], now), _span(m["b"], now)
        if start >= end:
            raise ValueError("empty range")
        return TimeRange(start, end)
    if m["op"]:
        start, end = _span(m["x"], now)
        if m["op"] == "since":
            return TimeRange(start, None)
        return TimeRange(end, None) if m["op"] == "after" else TimeRange(None, start)
    return TimeRange(*_span(m["y"] or m["z"], now))


def _span(text: str, now: datetime) -> tuple[datetime, datetime]:
    s = text.removeprefix("the ")
    words = s.replace(",", "").split()
    if words[-1] in _SEASONS or (words[0] in _SEASONS and len(words) > 1):
        return _season(words, now)
    if words[-1] in _MONTHS or words[0] in _MONTHS:
        return _month(words, now)
    if re.fullmatch(_YEAR, s):
        start = datetime(int(s), 1, 1, tzinfo=UTC)
        return start, start.replace(year=start.year + 1)
    if words[0] in ("a", "an"):
        s = "1 " + " ".join(words[1:])
    r = parse_timeframe(s, now)
    if r.start is None or r.end is None:
        raise ValueError("not a span")
    return r.start, r.end


def _month(words: list[str], now: datetime) -> tuple[datetime, datetime]:
    """ "march", "march 2025", "last march", "this march"."""
    if words[0] in _MONTHS:
        month = _MONTHS.index(words[0]) + 1
        year = int(words[1]) if len(words) > 1 else None
    else:
        month = _MONTHS.index(words[1]) + 1
        year = now.year if words[0] == "this" else None
    if year is None:  # the latest begun, or with "last", the latest ended
        begun = month < now.month or (month == now.month and words[0] != "last")
        year = now.year if begun else now.year - 1
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, add_months(start, 1)


def _season(words: list[str], now: datetime) -> tuple[datetime, datetime]:
    """ "summer", "last summer", "this winter", "summer 2025", "winter of 2024"."""
    name = words[0] if words[0] in _SEASONS else words[1]
    first = _SEASONS[name]
    if words[-1].isdigit():
        start = datetime(int(words[-1]), first, 1, tzinfo=UTC)
    else:
        start = datetime(now.year, first, 1, tzinfo=UTC)
        if words[0] == "last":
            while add_months(start, 3) > now:  # latest ended
                start = start.replace(year=start.year - 1)
        elif words[0] != "this" or start > now:
            while start > now:  # latest begun
                start = start.replace(year=start.year - 1)
    return start, add_months(start, 3)


def _without(question: str, start: int, end: int) -> str:
    """The question with [start, end) cut out and the spacing around it repaired."""
    text = question[:start].rstrip() + " " + question[end:].lstrip()
    text = re.sub(r"\s+([?.!,;:])", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip(" ,")
