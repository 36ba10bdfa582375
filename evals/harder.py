"""The harder questions of a dialogue, asked after the first kinds (evals/facts.py) with a
random generator of their own, so the first kinds' questions stay as they were.

- `latest`: the latest of two values ("What is Leo's job title now?" after a new job): the
  evidence is the later turn only, the earlier one a close distractor.
- `inverted`: asked from the other side, naming the fact and not the speaker ("Who went to
  Peru?", "Whose sister is a midwife?"); only where the other speaker has no such fact.
- `speaker`: naming the speaker, about a kind of fact both speakers have ("Which instrument
  did Mia pick up first?" when Leo took up instruments too): without the speaker, the other
  speaker's turn answers as well.
- `synonym`: the same event in other words ("Did Mia get a dog?" for "we finally brought home
  a beagle puppy!"): no content word shared with the evidence but the speaker's name (as the
  `paraphrase` kind), but said with synonyms of its words rather than abstractly.
"""

from __future__ import annotations

import random

from evals import words as w
from evals.facts import Fact, Question, Speaker
from evals.overlap import shared_words

PER_SPEAKER = {"latest": 3, "inverted": 5, "speaker": 4, "synonym": 5}


def _pick(rng: random.Random, options: list[str]) -> str:
    return options[rng.randrange(len(options))]


def _worded(rng: random.Random, templates: list[str], fact: Fact, k: int, **slots: str
            ) -> Question | None:  # fmt: skip
    """A synonym question: the first template (in a seeded order) sharing at most one content
    word (the name) with the turn."""
    options = list(templates)
    rng.shuffle(options)
    turn = fact.turns[k]
    for t in options:
        text = t.format(p=fact.owner.name, pos=fact.owner.pos, **slots)
        if len(shared_words(text, turn.content)) <= 1:
            return Question("synonym", text, [turn], "yes")
    return None


def synonym(f: Fact, rng: random.Random) -> Question | None:
    d = f.data
    if f.type == "pet":
        return _worded(rng, w.PET_SYNONYMS[d["species"]], f, 0)
    if f.type == "move":
        k = rng.randrange(len(f.turns))
        for words, templates in w.MOVE_SYNONYMS.items():
            if words in f.lines[k]:
                return _worded(rng, templates, f, k)
        return None
    if f.type == "injury":
        return _worded(rng, [w.INJURY_SYNONYMS[d["part"]]], f, 0)
    if f.type == "allergy":
        return _worded(rng, w.ALLERGY_SYNONYMS, f, 0, x=w.ALLERGEN_SYNONYMS[d["x"]])
    if f.type == "purchase":
        x = w.PURCHASE_SYNONYMS[d["brand"]]
        return _worded(rng, w.PURCHASE_SYNONYM_QUESTIONS, f, 0, x=x)
    if f.type == "instruments":
        k = rng.randrange(2)
        x = w.INSTRUMENT_SYNONYMS[d[f"i{k + 1}"]]
        return _worded(rng, w.INSTRUMENT_SYNONYM_QUESTIONS, f, k, x=x)
    if f.type == "trips":
        k = rng.randrange(2)
        x = w.TRIP_REASON_SYNONYMS[d[f"reason{k}"]]
        return _worded(rng, w.TRIP_SYNONYM_QUESTIONS, f, k, x=x, country=d[f"country{k}"])
    return None


def latest(f: Fact) -> Question | None:
    """The later of a fact's two values, asked as what holds now."""
    p, t, d = f.owner.name, f.turns, f.data
    if len(t) != 2:
        return None
    if f.type == "job":
        return Question("latest", f"What is {p}'s job title now?", [t[1]], d["r2"])
    if f.type == "move":
        return Question("latest", f"Which city did {p} move to most recently?", [t[1]],
                        d["city1"])  # fmt: skip
    if f.type == "instruments":
        return Question("latest", f"Which instrument did {p} take up most recently?", [t[1]],
                        d["i2"])  # fmt: skip
    if f.type == "trips":
        return Question("latest", f"Where did {p} travel most recently?", [t[1]], d["city1"])
    return None


def _attribute(f: Fact) -> str:
    """What an inverted question about the fact names (compared with the other speaker's)."""
    d = f.data
    return {
        "pet": d.get("species", ""), "job": d.get("r2" if len(f.turns) == 2 else "r1", ""),
        "move": d.get(f"city{len(f.turns) - 1}", ""), "hobby": d.get("name", ""),
        "instruments": d.get("i1", ""), "trips": d.get("country0", ""),
        "sibling": f"{d.get('rel')} {d.get('job')}", "allergy": d.get("x", ""),
        "injury": d.get("part", ""), "purchase": d.get("category", ""),
        "project": d.get("desc", ""), "ticket": d.get("what", ""),
    }[f.type]  # fmt: skip


def inverted(f: Fact, rng: random.Random, other: Fact | None) -> Question | None:
    """Who did it, naming the fact; None when the other speaker's fact of the same type has
    the same attribute (the answer would be both)."""
    if other is not None and _attribute(other) == _attribute(f):
        return None
    p, t, d = f.owner.name, f.turns, f.data
    if f.type == "pet":
        species = d["species"]
        text = _pick(rng, [f"Who adopted a {species}?", f"Which of them has a {species}?"])
        return Question("inverted", text, t, p)
    if f.type == "job":
        role = d["r2"] if len(t) == 2 else d["r1"]
        return Question("inverted", f"Who works as a {role}?", [t[-1]], p)
    if f.type == "move":
        k = len(t) - 1
        return Question("inverted", f"Who moved to {d[f'city{k}']}?", [t[k]], p)
    if f.type == "hobby":
        return Question("inverted", f"Who took up {d['name']}?", t, p)
    if f.type == "instruments":
        k = rng.randrange(2)
        if other is not None and d[f"i{k + 1}"] in (other.data["i1"], other.data["i2"]):
            return None
        return Question("inverted", f"Who is learning the {d[f'i{k + 1}']}?", [t[k]], p)
    if f.type == "trips":
        k = rng.randrange(2)
        if other is not None and d[f"country{k}"] in (other.data["country0"],
                                                      other.data["country1"]):  # fmt: skip
            return None
        return Question("inverted", f"Who went to {d[f'country{k}']}?", [t[k]], p)
    if f.type == "sibling":
        return Question("inverted", f"Whose {d['rel']} is {d['job']}?", t, p)
    if f.type == "allergy":
        return Question("inverted", f"Who is allergic to {d['x']}?", t, p)
    if f.type == "injury":
        return Question("inverted", f"Who injured their {d['part']}?", t, p)
    if f.type == "purchase":
        return Question("inverted", f"Who bought a new {d['category']}?", t, p)
    if f.type == "project":
        return Question("inverted", f"Who is working on {d['desc']}?", t, p)
    if f.type == "ticket":
        return Question("inverted", f"Who had to deal with it when {d['what']}?", t, p)
    return None


def speaker(f: Fact) -> Question | None:
    """About the speaker's own turn of a kind of fact the other speaker has too (the caller
    checks that)."""
    p, pos, t, d = f.owner.name, f.owner.pos, f.turns, f.data
    text, k, answer = {
        "job": (f"How many years had {p} spent at {pos} first employer?", 0, d.get("years")),
        "move": (f"What was the first street {p} moved to?", 0, d.get("street0")),
        "pet": (f"What's the name of the animal {p} adopted?", 0, d.get("name")),
        "hobby": (f"What pastime did {p} start?", 0, d.get("name")),
        "instruments": (f"Which instrument did {p} pick up first?", 0, d.get("i1")),
        "trips": (f"Which city did {p} fly to first?", 0, d.get("city0")),
        "sibling": (f"What news did {p} share about {pos} sibling's career?", 1, d.get("job")),
        "allergy": (f"What did {p}'s allergy test show?", 0, d.get("x")),
        "injury": (f"What did {p}'s doctor say about the injury?", 0, d.get("part")),
        "purchase": (f"What did {p} buy?", 0, d.get("brand")),
        "project": (f"What project is {p} in charge of?", 0, d.get("code")),
        "ticket": (f"Which incident did {p} handle?", 0, d.get("code")),
    }[f.type]
    return Question("speaker", text, [t[k]], answer or "")


def harder_questions(
    rng: random.Random, pair: tuple[Speaker, Speaker], facts: dict[str, dict[str, Fact]]
) -> list[Question]:
    """The harder kinds for both speakers of a dialogue, at most PER_SPEAKER of each."""
    out: list[Question] = []
    for who in pair:
        mine = facts[who.name]
        theirs = facts[pair[1].name if who == pair[0] else pair[0].name]
        found: dict[str, list[Question]] = {k: [] for k in PER_SPEAKER}
        for kind, f in mine.items():
            for q in (
                latest(f),
                inverted(f, rng, theirs.get(kind)),
                speaker(f) if kind in theirs else None,
                synonym(f, rng),
            ):
                if q is not None:
                    found[q.kind].append(q)
        for kind, n in PER_SPEAKER.items():
            qs = found[kind]
            out += [qs[i] for i in sorted(rng.sample(range(len(qs)), min(n, len(qs))))]
    return out
