"""The two sets the supersede detector's `statement` rule is measured on (app/claims.py):
`python -m evals.changed_facts` rewrites evals/data/changed_facts.json.

- `changes`: pairs where the second statement gives another value of the first's subject
  and attribute (a favourite changed, a move, a new job, a standup moved), each said in one
  of several ways, some of which the rule does not read (it must propose nothing it is unsure
  of, so those count against its recall, not its precision);
- `distinct`: pairs about the same subject (or the same attribute word) that must not be
  merged: another attribute, another person's attribute ("Carla's sister lives in Rome" and
  "Carla lives in Oslo"), another event, another speaker's "my", a property that may have
  several values, a value said again, a past or wished-for fact beside the current one.

Each statement is `{"text": ..., "speaker": name or null}` (metadata `speaker`: whose "my" it
is; null: the author robot's, `agent`). Pure Python, seeded (`random.Random` of a string):
the same file on every machine; tests/memories/test_changed_facts.py checks the committed
file is this output and measures the rule on it. Hand-made for this purpose, from no
benchmark or other data set.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

SEED = "htm-changed-facts-2026"
PATH = Path(__file__).resolve().parent / "data" / "changed_facts.json"

NAMES = [
    "Carla", "Ben", "Priya", "Tomas", "Mei", "Jonah", "Aisha", "Lukas", "Sofia", "Omar",
    "Hana", "Diego", "Ingrid", "Kwame", "Yuki", "Rosa",
]  # fmt: skip
COLOURS = ["green", "purple", "blue", "red", "yellow", "orange", "teal", "black"]
FOODS = ["pasta", "sushi", "tacos", "curry", "ramen", "paella", "dumplings", "risotto"]
DRINKS = ["coffee", "green tea", "lemonade", "espresso", "cola", "chai"]
SPORTS = ["tennis", "football", "climbing", "cycling", "swimming", "chess"]
CITIES = ["Oslo", "Rome", "Lisbon", "Berlin", "Madrid", "Toronto", "Osaka", "Nairobi", "Lima"]
COMPANIES = ["Google", "Acme", "Globex", "Initech", "Umbrella", "Stark Industries", "Hooli"]
JOBS = ["nurse", "teacher", "engineer", "designer", "architect", "pilot", "chef", "lawyer"]
PEOPLE = ["Tom", "Maria", "Sam", "Anna", "Lee", "Nina", "Raj", "Eva"]
EVENTS = ["standup", "retro", "weekly sync", "team meeting", "sprint review", "demo", "1:1"]
TIMES = ["9:30", "10:30", "11:00", "2pm", "15:00", "4:30pm", "noon", "Friday", "Tuesday"]
ROOMS = ["room 4", "the big room", "Zoom", "the lab", "room 12"]
PASSWORDS = ["hunter2", "blue-otter-7", "sunflower88", "x9-kettle", "maple-42"]
PHONES = ["555-0101", "555-0199", "555-0142", "555-0178", "555-0123"]

Statement = dict[str, str | None]
Pair = list[Statement]


def said(text: str, speaker: str | None = None) -> Statement:
    return {"text": text, "speaker": speaker}


def two(rng: random.Random, pool: list[str]) -> tuple[str, str]:
    a, b = rng.sample(pool, 2)
    return a, b


# --- changes: (old, new), new gives another value ------------------------------------------


def favourite(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    attr, pool = rng.choice([("colour", COLOURS), ("food", FOODS), ("drink", DRINKS)])
    a, b = two(rng, pool)
    old = f"{n}'s favourite {attr} is {a}"
    new = rng.choice(
        [
            f"{n}'s favourite {attr} is {b} now",
            f"{n}'s favourite {attr} is now {b}.",
            f"{n}'s favorite {attr.replace('colour', 'color')} is {b}",
            f"{n}'s favourite {attr} has changed to {b}",
            f"Update: {n}'s favourite {attr} is {b}",
            f"{n} says {b} is her favourite {attr} these days",  # not read
            f"{n} prefers {b} now",  # not read
        ]
    )
    return [said(old), said(new)]


def my_favourite(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, COLOURS)
    old, new = rng.choice(
        [
            (said(f"My favourite colour is {a}", n), said(f"{n}'s favourite colour is {b} now")),
            (said(f"{n}'s favourite colour is {a}"), said(f"My favourite colour is {b} now", n)),
            (said(f"My favourite colour is {a}", n), said(f"My favourite color is now {b}", n)),
        ]
    )
    return [old, new]


def home(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, CITIES)
    old = rng.choice([f"{n} lives in {a}", f"{n} is based in {a}", f"{n} moved to {a}"])
    new = rng.choice(
        [
            f"{n} moved to {b}",
            f"{n} lives in {b} now",
            f"{n} now lives in {b}.",
            f"{n} has relocated to {b}",
            f"{n} is based in {b} now",
            f"{n} packed up and left for {b}",  # not read
            f"{n} just got a flat in {b}",  # not read
        ]
    )
    return [said(old), said(new)]


def my_home(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, CITIES)
    old, new = rng.choice(
        [
            (said(f"I live in {a}", n), said(f"I moved to {b}", n)),
            (said(f"{n} lives in {a}"), said(f"I've moved to {b}", n)),
            (said(f"I live in {a}", n), said(f"{n} lives in {b} now")),
        ]
    )
    return [old, new]


def employer(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, COMPANIES)
    old = rng.choice([f"{n} works at {a}", f"{n} works for {a}"])
    new = rng.choice(
        [
            f"{n} joined {b}",
            f"{n} works at {b} now",
            f"{n} now works for {b}",
            f"{n} left {a} for {b}",  # not read
            f"{n} started a new job at {b}",  # not read
        ]
    )
    return [said(old), said(new)]


def job(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, JOBS)
    art = "an" if b[0] in "aeiou" else "a"
    old = rng.choice([f"{n} works as a {a}", f"{n}'s job is {a}"])
    new = rng.choice(
        [f"{n} works as {art} {b} now", f"{n}'s job is {b} now", f"{n} retrained as {art} {b}"]
    )
    return [said(old), said(new)]


def event(rng: random.Random) -> Pair:
    e = rng.choice(EVENTS)
    a, b = two(rng, TIMES)
    old = rng.choice([f"The {e} is at {a}", f"Our {e} is at {a}", f"the {e} is on {a}"])
    new = rng.choice(
        [
            f"We moved the {e} to {b}",
            f"we moved the {e} to {b}",
            f"The {e} has been moved to {b}",
            f"The {e} is now at {b}",
            f"The {e} got pushed to {b}",
            f"We've rescheduled the {e} to {b}",
            f"{e.capitalize()} moved to {b}",  # not read
            f"From next week the {e} starts at {b}",  # not read
        ]
    )
    return [said(old), said(new)]


def place(rng: random.Random) -> Pair:
    e = rng.choice(EVENTS)
    a, b = two(rng, ROOMS)
    return [said(f"The {e} is in {a}"), said(f"We moved the {e} to {b}")]


def property_(rng: random.Random) -> Pair:
    kind = rng.randrange(6)
    n = rng.choice(NAMES)
    if kind == 0:
        a, b = two(rng, PASSWORDS)
        return [said(f"Our wifi password is {a}"), said(f"The wifi password is {b} now")]
    if kind == 1:
        a, b = two(rng, ["Friday", "Monday", "March 3", "the 14th", "next Tuesday"])
        return [said(f"The deadline is {a}"), said(f"The deadline moved to {b}")]
    if kind == 2:
        a, b = two(rng, PEOPLE)
        return [said(f"{n}'s manager is {a}"), said(f"{n}'s manager is {b} now")]
    if kind == 3:
        a, b = two(rng, PHONES)
        return [said(f"My phone number is {a}", n), said(f"{n}'s phone number is {b}")]
    if kind == 4:
        a, b = two(rng, PHONES)
        return [said(f"{n}'s mobile number is {a}"), said(f"My number is {b} now", n)]
    a, b = two(rng, ["31", "32", "40", "27", "58"])
    return [said(f"{n} is {a}"), said(f"{n} just turned {b}")]


def partner(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    a, b = two(rng, PEOPLE)
    return [said(f"{n} is dating {a}"), said(f"{n} is married to {b}")]


CHANGES: list[tuple[Callable[[random.Random], Pair], int]] = [
    (favourite, 22), (my_favourite, 8), (home, 18), (my_home, 8), (employer, 14), (job, 8),
    (event, 24), (place, 6), (property_, 18), (partner, 4),
]  # fmt: skip


# --- distinct: the same subject (or attribute word), not the same fact ----------------------


def other_attribute(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    return rng.choice(
        [
            [
                said(f"{n}'s favourite colour is {rng.choice(COLOURS)}"),
                said(f"{n}'s favourite food is {rng.choice(FOODS)}"),
            ],
            [
                said(f"{n}'s favourite drink is {rng.choice(DRINKS)}"),
                said(f"{n}'s favourite sport is {rng.choice(SPORTS)}"),
            ],
            [
                said(f"{n} lives in {rng.choice(CITIES)}"),
                said(f"{n} works at {rng.choice(COMPANIES)}"),
            ],
            [
                said(f"{n} works at {rng.choice(COMPANIES)}"),
                said(f"{n} works as a {rng.choice(JOBS)}"),
            ],
            [
                said(f"{n}'s phone number is {rng.choice(PHONES)}"),
                said(f"{n}'s office number is {rng.choice(PHONES)}"),
            ],
            [said(f"{n}'s birthday is May 3"), said(f"{n}'s wedding anniversary is June 9")],
            [
                said(f"{n}'s favourite colour is {rng.choice(COLOURS)}"),
                said(f"{n}'s favourite colour scheme is dark"),
            ],
            [said(f"{n} is 31"), said(f"{n} lives in {rng.choice(CITIES)}")],
        ]
    )


def other_person(rng: random.Random) -> Pair:
    n = rng.choice(NAMES)
    m = rng.choice([x for x in NAMES if x != n])
    rel = rng.choice(["sister", "brother", "mother", "father", "husband", "wife", "son", "boss"])
    a, b = two(rng, CITIES)
    c1, c2 = two(rng, COLOURS)
    p1, p2 = two(rng, PHONES)
    return rng.choice(
        [
            [said(f"{n}'s {rel} lives in {a}"), said(f"{n} lives in {b}")],
            [said(f"{n} lives in {a}"), said(f"{n}'s {rel} moved to {b}")],
            [said(f"{n}'s favourite colour is {c1}"), said(f"{m}'s favourite colour is {c2}")],
            [
                said(f"{n}'s favourite colour is {c1}"),
                said(f"{n}'s {rel}'s favourite colour is {c2}"),
            ],
            [said(f"My phone number is {p1}", n), said(f"My phone number is {p2}", m)],
            [said(f"I live in {a}", n), said(f"I live in {b}", m)],
            [said(f"{n} works at {rng.choice(COMPANIES)}"), said(f"{n}'s {rel} works at Hooli")],
            [said(f"{n} is {rng.choice(['31', '40'])}"), said(f"{n}'s {rel} is 5")],
            [said(f"My favourite colour is {c1}", n), said(f"{m}'s favourite colour is {c2}")],
        ]
    )


def other_event(rng: random.Random) -> Pair:
    e, f = two(rng, EVENTS)
    a, b = two(rng, TIMES)
    return rng.choice(
        [
            [said(f"The {e} is at {a}"), said(f"The {f} is at {b}")],
            [said(f"The {e} is at {a}"), said(f"We moved the {f} to {b}")],
            [said(f"The {e} is at {a}"), said(f"The {e} is in {rng.choice(ROOMS)}")],
            [
                said(f"The {e} is in {rng.choice(ROOMS)}"),
                said(f"The {f} is in {rng.choice(ROOMS)}"),
            ],
            [said(f"Our team lead is {rng.choice(PEOPLE)}"), said("Our tech lead is Sam")],
            [
                said("The deadline for the report is Friday"),
                said("The deadline for the slides is Monday"),
            ],
            [said(f"My {e} is at {a}", rng.choice(NAMES)), said(f"The {e} is at {b}")],
        ]
    )


def several_values(rng: random.Random) -> Pair:
    """A property a subject may have several of at once, or a description beside a value."""
    n = rng.choice(NAMES)
    a, b = two(rng, FOODS)
    c, d = two(rng, CITIES)
    return rng.choice(
        [
            [said(f"{n} likes {a}"), said(f"{n} likes {b}")],
            [said(f"{n} speaks French"), said(f"{n} speaks Spanish")],
            [said(f"{n} has a dog"), said(f"{n} has a cat")],
            [said(f"{n} visited {c}"), said(f"{n} visited {d}")],
            [said(f"{n}'s car is red"), said(f"{n}'s car is fast")],
            [said(f"{n}'s sister is a doctor"), said(f"{n}'s sister is Anna")],
            [said(f"{n}'s boss is {rng.choice(PEOPLE)}"), said(f"{n}'s boss is great")],
            [said(f"{n}'s flat is small"), said(f"{n}'s flat is in {c}")],
            [
                said(f"{n} works at {rng.choice(COMPANIES)}"),
                said(f"{n} works at Hooli on weekends"),
            ],
            [said(f"{n} lives in {c}"), said(f"{n} lives in {d} during the summer")],
            [said(f"{n} is a {rng.choice(JOBS)}"), said(f"{n} is a mother")],
            [said("The standup is short"), said("The standup is useful")],
        ]
    )


def same_or_not_now(rng: random.Random) -> Pair:
    """A value said again, or a fact of the past, the future or in doubt beside the current."""
    n = rng.choice(NAMES)
    c, d = two(rng, CITIES)
    col, col2 = two(rng, COLOURS)
    return rng.choice(
        [
            [said(f"{n}'s favourite colour is {col}"), said(f"{n}'s favourite color is {col} now")],
            [said(f"{n} lives in {c}"), said(f"{n} still lives in {c}")],
            [said(f"{n} lives in {c}"), said(f"{n} used to live in {d}")],
            [said(f"{n} lives in {c}"), said(f"{n} wants to move to {d}")],
            [said(f"{n} lives in {c}"), said(f"{n} might move to {d}")],
            [said(f"{n} lives in {c}"), said(f"{n} grew up in {d}")],
            [said(f"{n} lives in {c}"), said(f"Does {n} live in {d}?")],
            [said(f"{n}'s favourite colour is {col}"), said(f"{n}'s favourite colour was {col2}")],
            [
                said(f"{n}'s favourite colour is {col}"),
                said(f"{n}'s favourite colour is not {col2}"),
            ],
            [said(f"{n} works at {rng.choice(COMPANIES)}"), said(f"{n} will join Hooli in May")],
            [said("The standup is at 10:30"), said("The standup is at 11:00 today")],
            [said(f"{n} lives in {c}"), said(f"She lives in {d}")],
            [said(f"{n}'s favourite colour is {col}"), said(f"Her favourite colour is {col2}")],
        ]
    )


DISTINCT: list[tuple[Callable[[random.Random], Pair], int]] = [
    (other_attribute, 28), (other_person, 32), (other_event, 24), (several_values, 30),
    (same_or_not_now, 26),
]  # fmt: skip


def generate() -> dict[str, list[Pair]]:
    rng = random.Random(SEED)
    sets: dict[str, list[Pair]] = {}
    for name, makers in (("changes", CHANGES), ("distinct", DISTINCT)):
        pairs: list[Pair] = []
        for make, count in makers:
            for _ in range(count):
                pair = make(rng)
                while pair in pairs:  # no pair twice
                    pair = make(rng)
                pairs.append(pair)
        sets[name] = pairs
    return sets


def dumped(sets: dict[str, list[Pair]]) -> str:
    return json.dumps(sets, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(dumped(generate()))
    print(f"wrote {PATH}: " + ", ".join(f"{k} {len(v)}" for k, v in generate().items()))
