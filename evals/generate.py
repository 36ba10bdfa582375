"""The conversational set, generated: `python -m evals.generate` rewrites evals/data/conv/.

Pure Python and seeded (`random.Random` seeded with a string, which CPython hashes with
SHA-512, so the output is the same on every machine and every run). Each dialogue is two
named speakers chatting over 8-15 dated sessions spread over 3-8 months of 2025-2026: mostly
small talk, with facts about their lives planted in some turns (and some facts updated later:
a second move, a new job). Questions are asked about the facts (evals/facts.py, then the
harder kinds of evals/harder.py); each names its evidence turns.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from evals import words as w
from evals.facts import OPTIONAL, Fact, Pools, Question, Speaker, Turn, linked_questions, plant
from evals.facts import questions as ask
from evals.harder import harder_questions

SEED = "htm-conv-2026"
DIALOGUES = 12
TEST_FROM = 8  # d01-d07 are the dev split, d08-d12 the test split
DATA_DIR = Path(__file__).resolve().parent / "data" / "conv"
FILES = ("dialogues.jsonl", "turns.jsonl", "questions.jsonl", "changes.jsonl")
# The facts a later turn replaces (a second job, a second move): changes.jsonl, what an agent
# labelling its memories with `subject` and `attribute` would say (evals/sets.py `labels`).
CHANGING = {"job": "job", "move": "home"}
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip


def _fill(rng: random.Random, template: str, other: str, today: str = "") -> str:
    slots = {k: v[rng.randrange(len(v))] for k, v in w.SLOTS.items()}
    return _cap(template.format(other=other, today=today, **slots))


def _cap(text: str) -> str:
    """Sentence case: the first letter, and the first after a sentence's end."""
    text = text[0].upper() + text[1:]
    return re.sub(r"([.!?] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


# fact lines that read well after "Guess what, " and the like
_PREFIXABLE = {
    "we",
    "i",
    "i'm",
    "i've",
    "my",
    "started",
    "signed",
    "made",
    "bought",
    "went",
    "tried",
    "joined",
    "took",
    "planted",
    "got",
    "finished",
    "taught",
    "did",
    "spent",
    "picked",
    "there's",
}


def _session_starts(rng: random.Random) -> list[datetime]:
    n = rng.randint(8, 15)
    span = rng.randint(3, 8)
    first = rng.randint(0, 23 - span)  # months after January 2025
    start = datetime(2025 + first // 12, first % 12 + 1, 1, tzinfo=UTC)
    end_m = first + span
    end = datetime(2025 + end_m // 12, end_m % 12 + 1, 1, tzinfo=UTC)
    days = sorted(rng.sample(range((end - start).days), n))
    return [
        start + timedelta(days=d, hours=rng.randint(7, 21), minutes=rng.randrange(60)) for d in days
    ]


def _place(rng: random.Random, facts: list[Fact], sessions: int) -> dict[int, list[Fact | int]]:
    """Which session each fact line goes to: a fact's lines in increasing sessions."""
    plan: dict[int, list[tuple[Fact, int]]] = defaultdict(list)
    for f in facts:
        if f.early_first:
            chosen = [rng.randint(0, 1)]
            if len(f.lines) == 2:
                chosen.append(rng.randint(chosen[0] + 2, sessions - 1))
        else:
            chosen = sorted(rng.sample(range(sessions), len(f.lines)))
        for k, s in enumerate(chosen):
            plan[s].append((f, k))
    return plan  # type: ignore[return-value]


class _Session:
    """Builds one session's turns: an opening, exchanges of small talk with the planted
    facts among them, a closing."""

    def __init__(self, rng: random.Random, did: str, index: int, start: datetime,
                 pair: tuple[Speaker, Speaker]) -> None:  # fmt: skip
        self.rng, self.did, self.index, self.pair = rng, did, index, pair
        self.at = start
        self.turns: list[Turn] = []

    def other(self, who: Speaker) -> Speaker:
        return self.pair[1] if who == self.pair[0] else self.pair[0]

    def say(self, who: Speaker, text: str) -> Turn:
        n = len(self.turns)
        self.at += timedelta(seconds=self.rng.randint(15, 180))
        t = Turn(f"{self.did}-s{self.index:02d}-t{n:03d}", self.did, self.index, n, who.name,
                 self.at, text)  # fmt: skip
        self.turns.append(t)
        return t

    def small_talk(self, who: Speaker) -> None:
        rng, you = self.rng, self.other(who)
        shape = rng.random()
        if shape < 0.4:
            question, answers = rng.choice(w.SMALL_QUESTIONS)
            self.say(who, _fill(rng, question, you.name))
            self.say(you, _fill(rng, rng.choice(answers), who.name))
            if rng.random() < 0.5:
                self.say(who, rng.choice(w.REACTIONS))
        elif shape < 0.8:
            self.say(who, _fill(rng, rng.choice(w.SMALL_STATEMENTS), you.name))
            self.say(you, rng.choice(w.REACTIONS))
        else:
            self.say(who, _fill(rng, rng.choice(w.SMALL_STATEMENTS), you.name))
            self.say(you, _fill(rng, rng.choice(w.SMALL_STATEMENTS), who.name))

    def fact(self, f: Fact, k: int) -> None:
        rng, you = self.rng, self.other(f.owner)
        if rng.random() < 0.5:
            self.say(you, rng.choice(w.LEAD_INS))
        prefix = ""
        if f.lines[k].split()[0].lower() in _PREFIXABLE and f.moods[k] != "plain":
            prefix = rng.choice(["", "", "OK so ", "Guess what, ", "Update: ", "Oh! "])
        line = _cap(f.lines[k]) if prefix in ("", "Oh! ") else f.lines[k]
        f.turns.append(self.say(f.owner, _cap(prefix + line)))
        if rng.random() < 0.85:
            self.say(you, rng.choice(w.FACT_REACTIONS[f.moods[k]]))

    def build(self, planted: list[tuple[Fact, int]], target: int, follow_up: bool) -> None:
        rng = self.rng
        a = rng.choice(self.pair)
        today = f"{self.at:%A}"
        self.say(a, _fill(rng, rng.choice(w.OPENERS), self.other(a).name, today))
        self.say(self.other(a), _fill(rng, rng.choice(w.GREETING_REPLIES), a.name))
        room = max(len(planted) + 1, (target - 4) // 3)
        slots = set(rng.sample(range(1, room), len(planted)))
        pending = list(planted)
        rng.shuffle(pending)
        step = 0
        while len(self.turns) < target - 2 or pending:
            if pending and (step in slots or len(self.turns) >= target - 6):
                self.fact(*pending.pop())
            elif follow_up and rng.random() < 0.1:
                ask, answer = rng.choice(w.FOLLOW_UPS)
                who = rng.choice(self.pair)
                self.say(who, ask)
                self.say(self.other(who), answer)
                follow_up = False
            else:
                self.small_talk(rng.choice(self.pair))
            step += 1
        bye, reply = rng.choice(w.CLOSERS)
        b = rng.choice(self.pair)
        self.say(b, bye)
        self.say(self.other(b), reply)


def _month_questions(rng: random.Random, who: Speaker, facts: list[Fact]) -> list[Question]:
    """'What did Leo do in March 2025?': every event turn of Leo's in that month."""
    by_month: dict[tuple[int, int], list[Turn]] = defaultdict(list)
    for f in facts:
        for k in f.events:
            if k < len(f.turns):
                t = f.turns[k]
                by_month[(t.at.year, t.at.month)].append(t)
    months = sorted(m for m, ts in by_month.items() if len(ts) <= 3)
    out = []
    for y, m in rng.sample(months, min(2, len(months))):
        form = rng.choice(["What did {p} do in {m}?", "What was {p} up to in {m}?",
                           "What happened in {p}'s life in {m}?"])  # fmt: skip
        text = form.format(p=who.name, m=f"{MONTHS[m - 1]} {y}")
        start = datetime(y, m, 1, tzinfo=UTC)
        end = datetime(y + m // 12, m % 12 + 1, 1, tzinfo=UTC)
        evidence = sorted(by_month[(y, m)], key=lambda t: t.at)
        out.append(Question("temporal", text, evidence, "", (start, end)))
    return out


def dialogue(
    index: int,
) -> tuple[dict[str, object], list[Turn], list[Question], list[dict[str, object]]]:
    rng = random.Random(f"{SEED}-{index}")
    did = f"d{index + 1:02d}"
    pair = (Speaker(*w.SPEAKERS[2 * index]), Speaker(*w.SPEAKERS[2 * index + 1]))
    starts = _session_starts(rng)
    pools = Pools(rng)
    facts: dict[str, dict[str, Fact]] = {}
    for who in pair:
        kinds = ["job", "move", *rng.sample(OPTIONAL, 7)]
        facts[who.name] = {k: plant(k, who, rng, pools) for k in kinds}
    every = [f for fs in facts.values() for f in fs.values()]
    plan = _place(rng, every, len(starts))
    per_session = rng.randint(240, 340) // len(starts) + 5
    turns: list[Turn] = []
    for s, start in enumerate(starts):
        session = _Session(rng, did, s, start, pair)
        session.build(plan.get(s, []), per_session + rng.randint(-3, 3), follow_up=s > 1)  # type: ignore[arg-type]
        turns += session.turns
    qs: list[Question] = []
    for who in pair:
        for f in facts[who.name].values():
            qs += ask(f, rng)
        qs += linked_questions(facts[who.name])
        qs += _month_questions(rng, who, list(facts[who.name].values()))
    # the harder kinds after the first ones, from a generator of their own: adding them left
    # every earlier question as it was
    qs += harder_questions(random.Random(f"{SEED}-{index}-harder"), pair, facts)
    unique: dict[str, Question] = {}
    for q in qs:
        unique.setdefault(q.text, q)
    meta = {
        "id": did,
        "split": "dev" if index + 1 < TEST_FROM else "test",
        "speakers": [p.name for p in pair],
        "sessions": [s.isoformat().replace("+00:00", "Z") for s in starts],
    }
    changes: list[dict[str, object]] = [
        {"dialogue": did, "subject": f.owner.name, "attribute": CHANGING[f.type],
         "turns": [t.id for t in f.turns]}
        for who in pair for f in facts[who.name].values()
        if f.type in CHANGING and len(f.turns) == 2
    ]  # fmt: skip
    return meta, turns, list(unique.values()), changes


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def render() -> dict[str, str]:
    """The set's three JSON Lines files, as text."""
    lines: dict[str, list[str]] = {name: [] for name in FILES}

    def dump(name: str, obj: dict[str, object]) -> None:
        lines[name].append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))

    for i in range(DIALOGUES):
        meta, turns, qs, changes = dialogue(i)
        dump("dialogues.jsonl", meta)
        for c in changes:
            dump("changes.jsonl", c)
        for t in turns:
            dump("turns.jsonl", {"id": t.id, "dialogue": t.dialogue, "session": t.session,
                                 "turn": t.turn, "speaker": t.speaker, "at": _iso(t.at),
                                 "text": t.text})  # fmt: skip
        for n, q in enumerate(qs):
            speaker = q.evidence[0].speaker
            row: dict[str, object] = {
                "id": f"{meta['id']}-q{n:03d}", "dialogue": meta["id"], "split": meta["split"],
                "kind": q.kind, "speaker": speaker, "question": q.text,
                "evidence": [e.id for e in q.evidence], "answer": q.answer,
            }  # fmt: skip
            if q.range is not None:
                row["range"] = {"start": _iso(q.range[0]), "end": _iso(q.range[1])}
            dump("questions.jsonl", row)
    return {name: "\n".join(rows) + "\n" for name, rows in lines.items()}


def write(directory: Path = DATA_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (directory / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write()
    print(f"wrote {', '.join(FILES)} under {DATA_DIR}")
