"""A memory's text read as one fact: who or what it is about (`subject`), which of its
properties (`attribute`) and the value it has now (`value`), for the common shapes of a fact
that changes, without labels, a model or an LLM. Pure functions of the text (and of whose
"my" it is), used by the supersede detector's `statement` rule (app/memories/supersede.py)
and by recall's "the newer statement first" (app/recall/service.py).

Precision before coverage: anything the grammar below does not read with confidence is None
(a negation, a modal or past tense, more than one sentence, a pronoun it cannot resolve, a
value that is a clause, a property that may have several values). The shapes read:

- possessive: "Carla's favourite colour is purple (now)", "my phone number is …", "our
  wifi password is …", "Carla's sister's job is …" (subject `carla's sister`): the property
  must be a favourite-something or end in a word of `SINGLE_VALUED` (a person's role, such
  as boss, takes a name);
- "the X is …" with X's last word in `SINGLE_VALUED`: "the deadline is Friday";
- an event's slot: "the standup is at 10:30", "we moved the standup to 10:30", "the retro
  was moved to Friday": attribute `standup time` (a time or a day) or `standup place`;
- a person's verbs: lives in / moved to / is based in (`home`), works at / for, joined
  (`employer`), works as (`job`), is married to / dating / engaged to (`partner`), is N
  (years old), turned N (`age`), goes by (`nickname`).

Subjects and attributes are normalised: case, possessives, British/American spellings
(colour/color, favourite/favorite), simple plurals, a few synonyms (mobile → phone number);
"I"/"my" is the memory's speaker (metadata `speaker`) or else its author robot, "we"/"our"/
"the" (an unowned event or property) the namespace's own, `we`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from app.conversation import speaker_of


@dataclass(frozen=True)
class Fact:
    subject: str
    attribute: str
    value: str
    # Words a text stating the same (subject, attribute) contains, one of each group: what
    # the detector's full-text lookup asks for (SupersedeRepository.same_statement).
    terms: tuple[tuple[str, ...], ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.subject, self.attribute


def changes(old: Fact | None, new: Fact | None) -> bool:
    """Whether `new` states another value of `old`'s subject and attribute."""
    return old is not None and new is not None and old.key == new.key and old.value != new.value


def me_of(metadata: dict[str, object], author: str) -> str:
    """Whose "I" a memory's text is: its speaker, else its author robot."""
    return (speaker_of(metadata) or author).strip().lower()


# --- words -----------------------------------------------------------------------------------

SPELLINGS = {
    "colour": "color", "colours": "colors", "favourite": "favorite", "favourites": "favorites",
    "fav": "favorite", "neighbour": "neighbor", "centre": "center", "flavour": "flavor",
    "organisation": "organization", "programme": "program", "theatre": "theater",
    "licence": "license", "cheque": "check", "behaviour": "behavior", "honour": "honor",
    "stand-up": "standup", "e-mail": "email", "timezone": "time zone",
}  # fmt: skip
SYNONYMS = {
    "phone": "phone number", "mobile": "phone number", "mobile number": "phone number",
    "cell": "phone number", "cell number": "phone number", "cellphone number": "phone number",
    "telephone number": "phone number", "number": "phone number",
    "email address": "email", "home address": "address", "postal address": "address",
    "date of birth": "birthday", "birth date": "birthday", "surname": "last name",
    "family name": "last name", "given name": "first name", "home town": "hometown",
    "job title": "title", "occupation": "job", "profession": "job",
}  # fmt: skip
# Each alternative a synonym's text may use, for the lookup (`Fact.terms`).
_SURFACE: dict[str, set[str]] = {}
for _said, _meant in SYNONYMS.items():
    _SURFACE.setdefault(_meant, set(_meant.split())).update(_said.split())

# Properties that have one value at a time (the last word of the attribute), and of those
# the roles a person fills: their value is a name.
PEOPLE = {
    "boss", "manager", "partner", "wife", "husband", "girlfriend", "boyfriend", "fiance",
    "fiancee", "doctor", "dentist", "landlord", "landlady", "lead", "owner", "mentor",
    "coach", "teacher", "therapist", "supervisor", "roommate", "flatmate", "assignee",
}  # fmt: skip
SINGLE_VALUED = PEOPLE | {
    "number", "address", "email", "name", "nickname", "birthday", "age", "job", "title",
    "role", "position", "hometown", "city", "country", "password", "code", "pin", "username",
    "handle", "salary", "rent", "budget", "price", "color", "size", "height", "weight",
    "zone", "plan", "team", "employer", "company", "school", "university", "major",
    "department", "office", "desk", "deadline", "date", "time", "day", "schedule", "slot",
    "location", "status", "version", "limit", "goal", "diet", "shift", "hour", "room",
    "floor", "bank", "provider", "gym", "url", "website", "id", "account", "timeline",
    "priority", "owner", "capital", "ceiling", "quota", "target", "rate", "fee", "level",
}  # fmt: skip
# Words that make a sentence something other than a plain statement of the present.
_HEDGES = re.compile(
    r"\b(?:not|no|never|cannot|might|maybe|perhaps|probably|possibly|if|would|could|"
    r"should|will|shall|wants?|plans?|planning|thinks?|thought|hopes?|wish|wishes|unless|"
    r"until|or|used|whether|today|tonight|temporarily|for now|this week|sometimes|usually|"
    r"also|too|either|neither|any|some|both|all|another|other|former|previous|ex|"
    r"again|who|which|that|what|when|where|why|how|he|she|they|it|his|her|their|its|them|"
    r"this|these|those|someone|somebody)\b|n't\b",
    re.IGNORECASE,
)
_CLAUSE = re.compile(
    r"\b(?:and|but|because|although|though|while|since|so|as|than|like|plus)\b|[,;()\"]",
    re.IGNORECASE,
)
_QUALIFIED = re.compile(
    r"\b(?:on|at|in|for|with|during|from|near|until|by|over|every|part-time|full-time)\b",
    re.IGNORECASE,
)
_LEAD = re.compile(
    r"^(?:(?:update|fyi|note|heads up|correction|actually|btw|by the way|also|so|ok|okay|"
    r"news|good news|quick update|just so you know)\s*[:,!-]*\s+)+",
    re.IGNORECASE,
)
_TRAIL = re.compile(
    r"(?:\s*,?\s+(?:now|these days|nowadays|currently|as of now|from now on|going forward|"
    r"instead|for good|at the moment|right now))+$",
    re.IGNORECASE,
)
_NOW = r"(?:(?:now|currently|actually)\s+)?"
_TIME = re.compile(
    r"\b(?:\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.|h)|\d{1,2}[:.]\d{2}|noon|midnight|"
    r"mornings?|afternoons?|evenings?|(?:mon|tues|wednes|thurs|fri|satur|sun)days?|weekends?|"
    r"tomorrow|next week|next month|january|february|march|april|june|july|august|"
    r"september|october|november|december|\d{1,2}(?:st|nd|rd|th))\b",
    re.IGNORECASE,
)
_NAME = r"[A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2}"  # a capitalised name of up to three words
# A lowercase noun phrase of 1-3 words (none a verb the shapes read after it).
_N = (
    r"(?!(?:is|are|am|was|were|has|have|had|got|been|be|now|just|moved|lives?|works?)\b)"
    r"[a-z][a-z-]*"
)
_NOUNS = rf"{_N}(?:\s+{_N}){{0,2}}"


def _word(w: str) -> str:
    w = SPELLINGS.get(w, w)
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is", "ys")):
        w = w[:-1]  # a simple plural: "favourite colours" is "favourite colour"
    return w


def _attribute(phrase: str) -> str:
    words = " ".join(SPELLINGS.get(w, w) for w in phrase.lower().split())
    words = SYNONYMS.get(words, words)
    return " ".join(_word(w) for w in words.split())


def _value(text: str) -> str | None:
    v = text.strip().strip("'\"").strip().lower()
    v = re.sub(r"^(?:(?:now|currently|actually|officially|finally)\s+)+", "", v)
    v = re.sub(r"^(?:a|an|the)\s+", "", v)
    v = re.sub(r"\s+", " ", v)
    if not v or len(v.split()) > 8:
        return None
    return v


# The words a statement of these attributes is said with, whichever shape it takes.
_SAID_WITH = {
    "home": {"live", "lives", "living", "moved", "relocated", "based"},
    "employer": {"work", "works", "working", "joined"},
    "job": {"work", "works", "working", "job", "occupation", "profession"},
    "partner": {"married", "dating", "engaged", "seeing"},
    "age": {"old", "turned", "age"},
    "nickname": {"goes", "nickname"},
}


def _terms(attribute: str) -> tuple[tuple[str, ...], ...]:
    """One group: the attribute's words (but `favorite`) in each spelling, and the words its
    synonyms are said with."""
    words = {w for w in attribute.split() if w != "favorite"} | _SURFACE.get(attribute, set())
    words |= _SAID_WITH.get(attribute, set())
    said = words | {k for k, v in SPELLINGS.items() if v in words}
    return (tuple(sorted(w for w in said if len(w) > 2)),)


def _named(fact: Fact, text: str) -> Fact:
    """The fact, its lookup narrowed by its subject's name when the text names it ("Carla's
    ...", not "my ..."): a statement of the same subject names it too, or its search text
    does (a conversation turn's is prefixed with its speaker, app/memories/search_text.py).
    An age ("Carla is 31") is looked up by the name alone: it names no attribute."""
    base = fact.subject.split("'s ")[0]
    name = re.findall(r"[a-z0-9]+", base)
    if base == "we" or not name:
        return fact
    if not set(name) <= set(re.findall(r"[a-z0-9]+", text.lower())):
        return fact
    if fact.attribute == "age":
        return replace(fact, terms=(tuple(name),))
    return replace(fact, terms=(*fact.terms, *((w,) for w in name)))


# --- subjects --------------------------------------------------------------------------------

_PRONOUNS_ME = {"i", "me", "my", "myself"}
_PRONOUNS_WE = {"we", "our", "us", "the"}


def _subject(owner: str, me: str) -> str | None:
    """An owner as a subject: a name, I/my, we/our, "the user", or a chain of possessives
    from one of those ("Carla's sister", "my manager"); None for anything else."""
    parts = [p.strip() for p in owner.split("'s ")]
    head = parts[0]
    lowered = head.lower()
    rest: list[str] = []
    if lowered in _PRONOUNS_ME:
        base = me
    elif lowered in ("we", "our"):
        base = "we"
    elif re.fullmatch(r"(?:my|our)\s+" + _NOUNS, lowered):
        first, _, noun = lowered.partition(" ")
        base, rest = (me if first == "my" else "we"), [noun]
    elif re.fullmatch(r"the\s+(?:user|client|customer|team|company|project|boss|office)", lowered):
        base = lowered.split()[1]
    elif re.fullmatch(_NAME, head) and lowered not in _PRONOUNS_ME | _PRONOUNS_WE | {"it"}:
        base = lowered
    else:
        return None
    for p in parts[1:]:
        if not re.fullmatch(_NOUNS, p):
            return None
        rest.append(p)
    return "'s ".join([base, *(" ".join(_word(w) for w in r.split()) for r in rest)])


# --- shapes ----------------------------------------------------------------------------------

_IS = r"(?:is|are|am|has become|has changed to|changed to|is now|has been changed to)"
_OWNED = re.compile(
    rf"^(?P<owner>my|our|My|Our)\s+(?P<attr>{_NOUNS})\s+{_IS}\s+{_NOW}(?P<value>.+)$"
)
_OWNER_POSSESSIVE = re.compile(
    rf"^(?P<owner>(?:{_NAME}|[Mm]y\s+{_NOUNS}|[Tt]he\s+[a-z]+)(?:'s\s+{_NOUNS})*)'s\s+"
    rf"(?P<attr>{_NOUNS})\s+{_IS}\s+{_NOW}(?P<value>.+)$"
)
_THE = re.compile(rf"^[Tt]he\s+(?P<attr>{_NOUNS})\s+{_IS}\s+{_NOW}(?P<value>.+)$")
_MOVE_VERBS = r"(?:moved|rescheduled|pushed|shifted|changed|switched|bumped|brought)"
_EVENT_MOVED_BY = re.compile(
    rf"^(?P<who>[Ww]e|I|{_NAME})(?:\s+have|'ve|\s+has)?\s+(?:just\s+)?{_MOVE_VERBS}\s+"
    rf"(?P<det>the|our|my)\s+(?P<event>{_NOUNS})\s+(?:back\s+|forward\s+|over\s+)?to\s+"
    rf"(?P<value>.+)$"
)
_EVENT_MOVED = re.compile(
    rf"^(?P<det>[Tt]he|[Oo]ur|[Mm]y)\s+(?P<event>{_NOUNS})\s+(?:has\s+been\s+|was\s+|is\s+|"
    rf"got\s+|has\s+)?(?:just\s+)?{_MOVE_VERBS}\s+(?:back\s+|forward\s+|over\s+)?to\s+"
    rf"(?P<value>.+)$"
)
_EVENT_AT = re.compile(
    rf"^(?P<det>[Tt]he|[Oo]ur|[Mm]y)\s+(?P<event>{_NOUNS})\s+(?:is|'s)\s+{_NOW}"
    rf"(?P<prep>at|on|in)\s+(?P<value>.+)$"
)
_PERSON = rf"(?P<who>I|[Ww]e|{_NAME}|[Mm]y\s+{_NOUNS}|{_NAME}'s\s+{_NOUNS}|[Tt]he\s+user)"
_VERBS: list[tuple[str, re.Pattern[str]]] = [
    (
        "home",
        re.compile(
            rf"^{_PERSON}\s+{_NOW}(?:lives?|is\s+living|am\s+living|are\s+living)\s+in\s+"
            rf"(?P<value>[A-Z].*)$"
        ),
    ),
    (
        "home",
        re.compile(
            rf"^{_PERSON}(?:\s+have|'ve|\s+has|'s)?\s+(?:just\s+)?(?:moved|relocated)\s+to\s+"
            rf"(?P<value>[A-Z].*)$"
        ),
    ),
    (
        "home",
        re.compile(rf"^{_PERSON}\s+(?:is|am|are|'s)\s+{_NOW}based\s+in\s+(?P<value>[A-Z].*)$"),
    ),
    (
        "employer",
        re.compile(
            rf"^{_PERSON}\s+{_NOW}(?:works?|is\s+working|am\s+working|are\s+working)\s+"
            rf"(?:at|for)\s+(?P<value>(?:the\s+)?[A-Z].*)$"
        ),
    ),
    (
        "employer",
        re.compile(rf"^{_PERSON}\s+(?:just\s+|has\s+|have\s+)?joined\s+(?P<value>[A-Z].*)$"),
    ),
    (
        "job",
        re.compile(
            rf"^{_PERSON}\s+{_NOW}(?:works?|is\s+working|am\s+working)\s+as\s+(?:an?\s+)?"
            rf"(?P<value>[a-z][a-z -]*)$"
        ),
    ),
    (
        "partner",
        re.compile(
            rf"^{_PERSON}\s+(?:is|am|are|'s)\s+{_NOW}(?:married\s+to|dating|engaged\s+to|"
            rf"seeing)\s+(?P<value>[A-Z][\w-]*(?:\s+[A-Z][\w-]*)?)$"
        ),
    ),
    (
        "age",
        re.compile(
            rf"^{_PERSON}\s+(?:is|am|'s|just\s+turned|turned|has\s+turned)\s+{_NOW}"
            rf"(?P<value>\d{{1,3}})(?:\s+years?\s+old)?$"
        ),
    ),
    (
        "nickname",
        re.compile(rf"^{_PERSON}\s+{_NOW}goes\s+by\s+(?P<value>[A-Z][\w-]*)$"),
    ),
]


def _sentence(text: str) -> str | None:
    """The text as one plain sentence (lead-ins and trailing "now" dropped), or None."""
    s = " ".join(text.replace("\u2019", "'").split())
    if not s or len(s) > 200 or s.endswith("?"):
        return None
    s = s.rstrip(".!")
    if re.search(r"[.!?;]\s", s):
        return None  # more than one sentence
    s = _LEAD.sub("", s)
    s = _TRAIL.sub("", s)
    if _HEDGES.search(s):
        return None
    return s or None


def _checked_value(attribute: str, raw: str) -> str | None:
    if _CLAUSE.search(raw) and attribute != "address":
        return None
    head = attribute.split()[-1]
    if head in PEOPLE and not re.match(r"[A-Z]", raw.strip()):
        return None  # a role takes a name ("my manager is Tom"), not a description
    return _value(raw)


def _slot(event: str, prep: str | None, raw: str, verb: bool) -> tuple[str, str] | None:
    """An event's (attribute, raw value): its time when the value is one, else its place."""
    name = _attribute(event)
    head = name.split()[-1]
    if head in PEOPLE:
        return None
    if head in SINGLE_VALUED:
        return name, raw
    if _TIME.search(raw) or (prep != "in" and re.fullmatch(r"\d{1,2}", raw.strip())):
        return f"{name} time", raw  # "at 10", "moved to 11": an hour
    if prep == "on":
        return None  # "the report is on the desk": not a slot
    if verb or prep in ("at", "in"):
        return f"{name} place", raw
    return None


def parse(text: str, me: str) -> Fact | None:
    """The fact a memory's text states, or None when it is not one of the shapes read (see
    the module's docstring). `me`: whose "I"/"my" it is (me_of)."""
    fact = _parse(text, me)
    return None if fact is None else _named(fact, text)


def _parse(text: str, me: str) -> Fact | None:
    s = _sentence(text)
    if s is None:
        return None
    me = me.strip().lower()
    for attr_name, pattern in _VERBS:
        m = pattern.match(s)
        if m:
            subject = _subject(m["who"], me)
            raw = m["value"]
            # "works at Hooli on weekends", "lives in Rome during the summer": a second one,
            # not another; "Demo moved to Tuesday": an event, not a person moving.
            doubt = _CLAUSE.search(raw) or _QUALIFIED.search(raw) or _TIME.search(raw)
            value = None if doubt else _value(raw)
            if subject is None or value is None:
                return None
            return Fact(subject, attr_name, value, _terms(attr_name))
    for pattern in (_EVENT_MOVED_BY, _EVENT_MOVED):
        m = pattern.match(s)
        if m:
            det = m["det"].lower()
            subject = me if det == "my" else "we"
            return _event(subject, m["event"], None, m["value"], verb=True)
    m = _EVENT_AT.match(s)
    if m and _attribute(m["event"]).split()[-1] not in SINGLE_VALUED:
        subject = me if m["det"].lower() == "my" else "we"
        return _event(subject, m["event"], m["prep"], m["value"], verb=False)
    m = _OWNER_POSSESSIVE.match(s) or _OWNED.match(s)
    if m:
        subject = _subject(m["owner"], me)
        return _property(subject, m["attr"], m["value"])
    m = _THE.match(s)
    if m:
        return _property("we", m["attr"], m["value"])
    return None


def _event(subject: str, event: str, prep: str | None, raw: str, *, verb: bool) -> Fact | None:
    if raw.lower().startswith(("a ", "an ")) or _CLAUSE.search(raw):
        return None
    slot = _slot(event, prep, raw, verb)
    if slot is None:
        return None
    attribute, raw = slot
    value = _value(re.sub(r"^(?:at|on|in)\s+", "", raw, flags=re.IGNORECASE))
    if value is None:
        return None
    return Fact(subject, attribute, value, _terms(_attribute(event)))


def _property(subject: str | None, attr: str, raw: str) -> Fact | None:
    if subject is None:
        return None
    attribute = _attribute(attr)
    words = attribute.split()
    if words[0] != "favorite" and words[-1] not in SINGLE_VALUED:
        return None
    if words[0] == "favorite" and len(words) == 1:
        return None
    value = _checked_value(attribute, raw)
    if value is None:
        return None
    value = re.sub(r"^(?:at|on|in)\s+", "", value)
    return Fact(subject, attribute, value, _terms(attribute))
