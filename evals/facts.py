"""The facts planted in a dialogue and the questions asked about them.

A `Fact` is what one speaker says about their life, in one or more turns (a second move, a
new job, a second instrument); `plant` makes it from the per-dialogue pools, and after the
turns are placed in sessions, `questions` asks about it: single facts, the latest of two
values, multi-hop (two turns, usually in different sessions), temporal ("when did..."),
paraphrases (little word overlap, checked) and rare names. The harder kinds asked after these
are evals/harder.py's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from evals import words as w
from evals.overlap import shared_words


@dataclass(frozen=True)
class Speaker:
    name: str
    pos: str  # his / her
    obj: str  # him / her


@dataclass
class Turn:
    id: str
    dialogue: str
    session: int
    turn: int
    speaker: str
    at: datetime
    text: str

    @property
    def content(self) -> str:
        """What is stored as the memory: the speaker, then what they said."""
        return f"{self.speaker}: {self.text}"


@dataclass
class Question:
    kind: str
    text: str
    evidence: list[Turn]
    answer: str
    range: tuple[datetime, datetime] | None = None


@dataclass
class Fact:
    owner: Speaker
    type: str
    lines: list[str]
    moods: tuple[str, ...]  # per line: which FACT_REACTIONS the other speaker answers with
    data: dict[str, str] = field(default_factory=dict)
    events: tuple[int, ...] = ()  # lines that are things the owner did (month questions)
    early_first: bool = False  # the first line belongs in the first sessions
    turns: list[Turn] = field(default_factory=list)


class Pools:
    """Each table shuffled once per dialogue and drawn without replacement, so no value
    (a pet's name, a street, a codename) occurs twice in one dialogue."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._pools: dict[str, list[object]] = {}

    def draw(self, name: str, table: list[object]) -> object:
        pool = self._pools.get(name)
        if pool is None:
            pool = list(table)
            self.rng.shuffle(pool)
            self._pools[name] = pool
        return pool.pop()


def _pick(rng: random.Random, options: list[str]) -> str:
    return options[rng.randrange(len(options))]


# --- planting ---------------------------------------------------------------------------------


def plant(kind: str, who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    return PLANTERS[kind](who, rng, pools)


def _pet(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    species = _pick(rng, sorted(w.PETS))
    breed = _pick(rng, w.PETS[species])
    name = str(pools.draw("pet", w.PET_NAMES))  # type: ignore[arg-type]
    pron = _pick(rng, ["him", "her"])
    line = _pick(
        rng,
        [
            f"we finally brought home a {breed}! we're calling {pron} {name}",
            f"big news, I adopted a {breed} from the shelter. {name} has already "
            + ("chewed one of my shoes" if species == "dog" else "claimed the sunny windowsill"),
            f"so {name} the {breed} is officially ours, the adoption papers went through",
            f"there's a {breed} asleep on my feet right now. Meet {name}",
        ],
    )
    data = {"species": species, "name": name, "breed": breed}
    return Fact(who, "pet", [line], ("cute",), data, events=(0,))


def _job(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    c1, c2 = (str(pools.draw("company", w.COMPANIES)) for _ in range(2))  # type: ignore[arg-type]
    r1, r2 = (str(pools.draw("role", w.ROLES)) for _ in range(2))  # type: ignore[arg-type]
    years = _pick(rng, ["two", "three", "four", "six"])
    first = _pick(
        rng,
        [
            f"I've been at {c1} for {years} years now as a {r1}, it's fine, it pays the rent",
            f"{c1} is the usual chaos, {years} years as a {r1} and nothing ever changes",
            f"being a {r1} at {c1} has its moments, {years} years in and I still like my team",
        ],
    )
    lines = [first]
    if rng.random() < 0.75:
        lines.append(
            _pick(
                rng,
                [
                    f"I accepted the offer! I'm joining {c2} as a {r2} on the first of the month",
                    f"handed in my notice today, {c2} hired me as their new {r2}",
                    f"first day at {c2} today! {r2} life begins",
                ],
            )
        )
    data = {"c1": c1, "r1": r1, "c2": c2, "r2": r2, "years": years}
    return Fact(who, "job", lines, ("plain", "good"), data, events=(1,), early_first=True)


def _move(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    templates = [
        "we signed the lease! the new place is on {street} in {city}",
        "boxes everywhere, we're finally in {city}. our street, {street}, is so quiet",
        "the van is booked, I'm off to {city} on Saturday, the flat is on {street}",
    ]
    rng.shuffle(templates)
    n = 2 if rng.random() < 0.6 else 1
    data: dict[str, str] = {}
    lines = []
    for k in range(n):
        city = str(pools.draw("city", w.CITIES))  # type: ignore[arg-type]
        street = str(pools.draw("street", w.STREETS))  # type: ignore[arg-type]
        data[f"city{k}"], data[f"street{k}"] = city, street
        lines.append(templates[k].format(city=city, street=street))
    return Fact(who, "move", lines, ("good", "good"), data, events=tuple(range(n)))


def _project(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    code = str(pools.draw("code", w.CODENAMES))  # type: ignore[arg-type]
    desc = _pick(rng, w.PROJECTS)
    line = _pick(
        rng,
        [
            f"we kicked off {code} today, it's basically {desc}",
            f"I got put in charge of {code}. it's {desc} and the deadline is brutal",
            f"{code} is eating my life, it's {desc} and nobody planned it properly",
        ],
    )
    return Fact(who, "project", [line], ("plain",), {"code": code, "desc": desc})


def _ticket(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    prefix = _pick(rng, ["INC", "CHG", "SR", "OPS"])
    code = f"{prefix}-{rng.randrange(1000, 99999)}"
    what = str(pools.draw("incident", w.INCIDENTS))  # type: ignore[arg-type]
    line = _pick(
        rng,
        [
            f"I was on call and {code} paged me at 3am, {what}",
            f"spent all morning on {code}: {what}",
            f"{code} is finally closed. {what}, what a week",
        ],
    )
    return Fact(who, "ticket", [line], ("bad",), {"code": code, "what": what})


def _hobby(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    name, word, lines, paraphrases = pools.draw("hobby", w.HOBBIES)  # type: ignore[misc,arg-type]
    line = _pick(rng, lines)
    data = {"name": name, "word": word, "para": "|".join(paraphrases)}
    return Fact(who, "hobby", [line], ("neutral",), data, events=(0,))


def _instruments(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    i1, i2 = (str(pools.draw("instrument", w.INSTRUMENTS)) for _ in range(2))  # type: ignore[arg-type]
    t1, t2 = rng.sample(w.INSTRUMENT_LINES, 2)
    lines = [t1.format(i=i1), t2.format(i=i2)]
    return Fact(
        who, "instruments", lines, ("neutral", "neutral"), {"i1": i1, "i2": i2}, events=(0, 1)
    )


def _trips(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    trips = [pools.draw("trip", w.TRIPS) for _ in range(2)]
    while trips[0][1] == trips[1][1]:  # type: ignore[index]
        trips[1] = pools.draw("trip", w.TRIPS)
    reasons = rng.sample(w.TRIP_REASONS, 2)
    templates = rng.sample(w.TRIP_LINES, 2)
    data, lines = {}, []
    for k, ((city, country, landmark), (reason, question), t) in enumerate(
        zip(trips, reasons, templates, strict=True)  # type: ignore[misc]
    ):
        lines.append(t.format(reason=reason, city=city, landmark=landmark))
        data.update({f"city{k}": city, f"country{k}": country, f"q{k}": question,
                     f"reason{k}": reason})  # fmt: skip
    return Fact(who, "trips", lines, ("neutral", "neutral"), data, events=(0, 1))


def _sibling(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    rel = _pick(rng, ["sister", "brother"])
    sib = str(pools.draw(rel, w.SISTERS if rel == "sister" else w.BROTHERS))
    job = str(pools.draw("sibjob", w.SIBLING_JOBS))  # type: ignore[arg-type]
    pron = "she" if rel == "sister" else "he"
    lines = [
        _pick(
            rng,
            [
                f"my {rel} {sib} is coming to stay with us for a week, send help",
                f"{sib}, my little {rel}, turned thirty on Sunday, we had cake at my parents'",
                f"my {rel} {sib} called, {pron} wants us all at the lake in August",
            ],
        ),
        _pick(
            rng,
            [
                f"{sib} just started working as {job}, still can't believe it",
                f"{sib} passed the exams, {pron} is officially {job}",
            ],
        ),
    ]
    return Fact(who, "sibling", lines, ("family", "good"), {"rel": rel, "sib": sib, "job": job})


def _allergy(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    x = str(pools.draw("allergen", w.ALLERGENS))  # type: ignore[arg-type]
    line = _pick(
        rng,
        [
            f"turns out the hives were from {x}. the allergist says no more {x} for me",
            f"got my test results back, I'm properly allergic to {x}, which explains a lot",
        ],
    )
    return Fact(who, "allergy", [line], ("bad",), {"x": x})


def _injury(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    part, how = pools.draw("injury", w.INJURIES)  # type: ignore[misc,arg-type]
    doc = str(pools.draw("doctor", w.DOCTORS))  # type: ignore[arg-type]
    line = _pick(
        rng,
        [
            f"I {how}, Dr. {doc} says six weeks in a brace",
            f"so I {how}. Dr. {doc} was very calm about it, at least",
        ],
    )
    return Fact(who, "injury", [line], ("bad",), {"part": part, "doc": doc}, events=(0,))


def _purchase(who: Speaker, rng: random.Random, pools: Pools) -> Fact:
    category, item, brand = pools.draw("purchase", w.PURCHASES)  # type: ignore[misc,arg-type]
    line = _pick(rng, w.PURCHASE_LINES).format(item=item)
    data = {"category": category, "brand": brand}
    return Fact(who, "purchase", [line], ("good",), data, events=(0,))


PLANTERS: dict[str, Callable[[Speaker, random.Random, Pools], Fact]] = {
    "job": _job,
    "move": _move,
    "pet": _pet,
    "project": _project,
    "ticket": _ticket,
    "hobby": _hobby,
    "instruments": _instruments,
    "trips": _trips,
    "sibling": _sibling,
    "allergy": _allergy,
    "injury": _injury,
    "purchase": _purchase,
}
OPTIONAL = [k for k in PLANTERS if k not in ("job", "move")]


# --- asking -----------------------------------------------------------------------------------


def day_range(t: Turn) -> tuple[datetime, datetime]:
    start = t.at.replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def paraphrase(
    rng: random.Random, templates: list[str], who: Speaker, evidence: list[Turn], answer: str
) -> list[Question]:
    """The first template (in a seeded order) sharing at most one content word with every
    evidence turn; none when every template shares more."""
    options = list(templates)
    rng.shuffle(options)
    for t in options:
        text = t.format(p=who.name, pos=who.pos)
        if all(len(shared_words(text, e.content)) <= 1 for e in evidence):
            return [Question("paraphrase", text, evidence, answer)]
    return []


def questions(f: Fact, rng: random.Random) -> list[Question]:
    p, pos, t, d = f.owner.name, f.owner.pos, f.turns, f.data
    qs: list[Question] = []
    if f.type == "pet":
        qs += [
            Question("single", _pick(rng, [f"What did {p} name the {d['species']}?",
                     f"What's the name of {p}'s {d['species']}?"]), t, d["name"]),
            Question("names", _pick(rng, [f"Who is {d['name']}?",
                     f"Who has a {d['species']} called {d['name']}?"]), t, p),
            Question("temporal", _pick(rng, [f"When did {p} adopt {d['name']}?",
                     f"When did {d['name']} join {p}'s family?"]), t, "", day_range(t[0])),
        ]  # fmt: skip
        qs += paraphrase(rng, [
            "Does {p} have any animals?", "Did {p} get a pet?",
            "Is there a furry companion living with {p}?", "What kind of animal lives with {p}?",
        ], f.owner, t, d["species"])  # fmt: skip
    elif f.type == "job":
        last, c_last = t[-1], d["c2"] if len(t) == 2 else d["c1"]
        now = "latest" if len(t) == 2 else "single"  # the latest of two values
        qs.append(Question(now, f"Where does {p} work now?", [last], c_last))
        qs.append(Question("names", f"Who works at {c_last}?", [last], p))
        qs += paraphrase(rng, [
            "Who is {p}'s employer?", "What does {p} do for a living?",
            "What is {p}'s occupation?",
        ], f.owner, [last], c_last)  # fmt: skip
        if len(t) == 2:
            qs += [
                Question("multi_hop", _pick(rng, [f"Which two companies has {p} worked for?",
                         f"What did {p} do before joining {d['c2']}?"]), t,
                         f"{d['c1']}, {d['c2']}"),
                Question("temporal", _pick(rng, [f"When did {p} accept the job at {d['c2']}?",
                         f"When did {p} start at {d['c2']}?"]), [t[1]], "", day_range(t[1])),
                Question("names", f"Who used to work at {d['c1']}?", [t[0]], p),
            ]  # fmt: skip
    elif f.type == "move":
        k = len(t) - 1
        city, street = d[f"city{k}"], d[f"street{k}"]
        now = "latest" if len(t) == 2 else "single"
        qs += [
            Question(now, f"Where does {p} live now?", [t[k]], city),
            Question(now, f"What street is {p}'s place on?", [t[k]], street),
            Question("names", f"Who lives on {street}?", [t[k]], p),
        ]
        for j in range(len(t)):
            c = d[f"city{j}"]
            qs.append(Question("temporal", f"When did {p} move to {c}?", [t[j]], "",
                               day_range(t[j])))  # fmt: skip
        qs += paraphrase(rng, [
            "Has {p} relocated?", "Which town is {p} based in?", "Did {p} change addresses?",
        ], f.owner, t, city)  # fmt: skip
        if len(t) == 2:
            qs.append(Question("multi_hop", _pick(rng, [f"Where did {p} live before {city}?",
                      f"Which cities has {p} lived in?"]), t, f"{d['city0']}, {city}"))  # fmt: skip
    elif f.type == "project":
        qs += [
            Question("names", f"What is {d['code']}?", t, d["desc"]),
            Question("names", f"Who is working on {d['code']}?", t, p),
        ]
    elif f.type == "ticket":
        qs += [
            Question("names", f"Who mentioned {d['code']}?", t, p),
            Question("names", f"What was {d['code']} about?", t, d["what"]),
        ]
    elif f.type == "hobby":
        qs += [
            Question("single", f"What hobby did {p} take up?", t, d["name"]),
            Question("temporal", f"When did {p} start {d['word']}?", t, "", day_range(t[0])),
        ]
        qs += paraphrase(rng, d["para"].split("|"), f.owner, t, d["name"])
    elif f.type == "instruments":
        both = f"{d['i1']}, {d['i2']}"
        qs += [
            Question("multi_hop", _pick(rng, [f"Which two instruments has {p} learned?",
                     f"What instrument did {p} take up after the {d['i1']}?"]), t, both),
            Question("temporal", f"When did {p} start learning the {d['i2']}?", [t[1]], "",
                     day_range(t[1])),
        ]  # fmt: skip
        qs += paraphrase(rng, w.INSTRUMENT_PARAPHRASES, f.owner, t, both)
    elif f.type == "trips":
        both = f"{d['country0']}, {d['country1']}"
        qs.append(Question("multi_hop", f"Which countries has {p} visited?", t, both))
        for j in range(2):
            qs.append(Question("single", d[f"q{j}"].format(p=p, pos=pos), [t[j]], d[f"city{j}"]))
            qs.append(Question("temporal", f"When did {p} visit {d[f'country{j}']}?", [t[j]], "",
                               day_range(t[j])))  # fmt: skip
        qs += paraphrase(rng, w.TRIP_PARAPHRASES, f.owner, t, both)
    elif f.type == "sibling":
        rel, sib = d["rel"], d["sib"]
        qs += [
            Question("multi_hop", f"What does {p}'s {rel} do for work?", t, d["job"]),
            Question("single", f"What is the name of {p}'s {rel}?", [t[0]], sib),
            Question("names", f"Who is {sib}?", t, f"{p}'s {rel}"),
        ]
        qs += paraphrase(rng, ["Does {p} have any siblings?", "How many siblings does {p} have?"],
                         f.owner, [t[0]], rel)  # fmt: skip
    elif f.type == "allergy":
        qs.append(Question("single", f"What is {p} allergic to?", t, d["x"]))
        qs += paraphrase(rng, [
            "What food does {p} need to avoid?", "Does {p} have any dietary restrictions?",
            "Is there something {p} can't eat?",
        ], f.owner, t, d["x"])  # fmt: skip
    elif f.type == "injury":
        qs += [
            Question("single", f"What did {p} injure?", t, d["part"]),
            Question("names", f"Who is Dr. {d['doc']}?", t, f"{p}'s doctor"),
            Question("temporal", f"When did {p} hurt {pos} {d['part']}?", t, "", day_range(t[0])),
        ]
        qs += paraphrase(rng, ["Did {p} get hurt?", "Has {p} had any accidents?"], f.owner, t,
                         d["part"])  # fmt: skip
    elif f.type == "purchase":
        qs += [
            Question("single", f"What {d['category']} did {p} buy?", t, d["brand"]),
            Question("names", f"Who bought the {d['brand']}?", t, p),
            Question("temporal", f"When did {p} buy the {d['category']}?", t, "",
                     day_range(t[0])),
        ]  # fmt: skip
        qs += paraphrase(rng, w.PURCHASE_PARAPHRASES, f.owner, t, d["brand"])
    return qs


def linked_questions(facts: dict[str, Fact]) -> list[Question]:
    """Multi-hop questions across two of a speaker's facts."""
    qs: list[Question] = []
    pet, move, job, project = (facts.get(k) for k in ("pet", "move", "job", "project"))
    if pet and move:
        city = move.data[f"city{len(move.turns) - 1}"]
        q = f"Which city does {pet.data['name']}'s owner live in now?"
        qs.append(Question("multi_hop", q, [pet.turns[0], move.turns[-1]], city))
    if project and job:
        # the job the owner had when the project came up
        k = 1 if len(job.turns) == 2 and job.turns[1].at <= project.turns[0].at else 0
        company = job.data[f"c{k + 1}"]
        who = project.owner.name
        q = f"What's the codename of the project {who} works on at {company}?"
        qs.append(Question("multi_hop", q, [job.turns[k], project.turns[0]], project.data["code"]))
    if move and job and len(move.turns) == 2 and len(job.turns) == 2:
        who = job.owner.name
        q = f"Where was {who} living when {job.owner.pos} job at {job.data['c2']} started?"
        moved = [m for m in move.turns if m.at <= job.turns[1].at]
        if moved:
            k = move.turns.index(moved[-1])
            qs.append(Question("multi_hop", q, [job.turns[1], moved[-1]], move.data[f"city{k}"]))
    return qs
