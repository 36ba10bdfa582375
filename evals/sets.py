"""The labelled sets the eval asks, in one shape: memories per group (each group is loaded
into a namespace of its own, so a question only searches its own dialogue) and questions.

- `conv`: the generated conversations of evals/data/conv/ (evals/generate.py).
- `facts`: bench/quality.py's set (bench/dataset.py `quality_dataset`): one fact per person
  and relation, a paraphrased question per fact, background noise around them.

A conversation turn is stored in one of two content styles (a deployment's `content`):
`prefixed`, "Speaker: text" (what a client had to send before the service built a search text
from a memory's context), or `plain`, the turn's text alone; the metadata
{dialogue, session, turn, speaker} is sent either way. The facts set has no speakers: its
content is the same in both styles.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evals.generate import DATA_DIR

FACTS_SEED = 20260101  # the bench's default seed, so the figures match bench/quality.py's
QUICK_DIALOGUES = ("d01", "d08")  # one dev and one test dialogue
ContentStyle = Literal["prefixed", "plain"]
CONTENT_STYLES: tuple[ContentStyle, ...] = ("prefixed", "plain")


@dataclass(frozen=True)
class Doc:
    key: str
    content: str
    created_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalQuestion:
    id: str
    group: str
    split: str  # dev | test
    kind: str
    text: str
    evidence: tuple[str, ...]
    speaker: str = ""
    range: dict[str, str] | None = None
    # About a fact a later turn replaced (changes.jsonl): "current", its evidence is the
    # later turn alone (what holds now); "earlier", its evidence includes the earlier turn
    changed: str | None = None
    stale: tuple[str, ...] = ()  # "current": the earlier value's memory (the distractor)


@dataclass
class EvalSet:
    name: str
    groups: dict[str, list[Doc]]
    questions: list[EvalQuestion]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def turn_content(speaker: str, text: str, style: ContentStyle = "prefixed") -> str:
    return f"{speaker}: {text}" if style == "prefixed" else text


def conv_set(
    quick: bool = False,
    directory: Path = DATA_DIR,
    content: ContentStyle = "prefixed",
    labels: bool = False,
) -> EvalSet:
    """With `labels`, the turns of changes.jsonl carry metadata `subject` and `attribute`,
    as an agent labelling the facts it stores would send them (the service's supersession
    detector reads them)."""
    keep = set(QUICK_DIALOGUES) if quick else None
    changes = _jsonl(directory / "changes.jsonl")
    labelled = {
        t: {"subject": c["subject"], "attribute": c["attribute"]}
        for c in changes
        for t in c["turns"]
    }
    later = {c["turns"][-1]: tuple(c["turns"][:-1]) for c in changes}
    earlier = {t for c in changes for t in c["turns"][:-1]}
    groups: dict[str, list[Doc]] = {}
    for t in _jsonl(directory / "turns.jsonl"):
        if keep is None or t["dialogue"] in keep:
            meta = {k: t[k] for k in ("dialogue", "session", "turn", "speaker")}
            if labels and t["id"] in labelled:
                meta.update(labelled[t["id"]])
            doc = Doc(t["id"], turn_content(t["speaker"], t["text"], content), t["at"], meta)
            groups.setdefault(t["dialogue"], []).append(doc)
    questions = [
        EvalQuestion(
            q["id"],
            q["dialogue"],
            q["split"],
            q["kind"],
            q["question"],
            tuple(q["evidence"]),
            q["speaker"],
            q.get("range"),
            _changed(q["evidence"], set(later), earlier),
            later.get(q["evidence"][0], ()) if len(q["evidence"]) == 1 else (),
        )
        for q in _jsonl(directory / "questions.jsonl")
        if keep is None or q["dialogue"] in keep
    ]
    return EvalSet("conv", groups, questions)


def _changed(evidence: list[str], later: set[str], earlier: set[str]) -> str | None:
    if earlier.intersection(evidence):
        return "earlier"
    if len(evidence) == 1 and evidence[0] in later:
        return "current"
    return None


def facts_set(
    quick: bool = False,
    seed: int = FACTS_SEED,
    content: ContentStyle = "prefixed",
    labels: bool = False,
) -> EvalSet:
    """bench/quality.py's set at its profile's size (full: 40 people, 3,000 background
    memories; quick: 12 and 400). People in the first half are dev, the rest test. No
    speakers, so `content` changes nothing."""
    from bench.dataset import quality_dataset

    people, background = (12, 400) if quick else (40, 3000)
    data = quality_dataset(seed, people, background)
    docs = [Doc(k, c) for k, c in data.facts.items()]
    docs += [Doc(f"bg-{i:05d}", c) for i, c in enumerate(data.background)]
    questions = []
    for n, (text, key) in enumerate(data.queries):
        person = int(key.split("-")[1])
        split = "dev" if person < people // 2 else "test"
        questions.append(EvalQuestion(f"facts-q{n:04d}", "facts", split, "single", text, (key,)))
    return EvalSet("facts", {"facts": docs}, questions)


# The relations of bench/dataset.py whose value a later fact replaces in the `changes` set.
CHANGING = ("job", "move", "car")
EARLIER_AT, LATER_AT = "2025-01-10T09:00:00Z", "2025-06-10T09:00:00Z"


def changes_set(
    quick: bool = False,
    seed: int = FACTS_SEED,
    content: ContentStyle = "prefixed",
    labels: bool = False,
) -> EvalSet:
    """Facts that change: the `facts` set, where each person's job, city and car had an
    earlier value, stated in the same words (January), before the one the `facts` set holds
    (June, key `<fact>@2`). The questions are the facts set's for those relations ("Where is
    Ana employed now?"), their evidence the later fact alone: the earlier one is the
    distractor a memory without supersede returns beside it. With `labels`, both carry
    metadata `subject` (the person) and `attribute` (the relation), as an agent storing facts
    would send them. The earlier facts are loaded first, the later ones last."""
    import random

    from bench.dataset import QUALITY_PEOPLE, RELATIONS, quality_dataset

    people, background = (12, 400) if quick else (40, 3000)
    data = quality_dataset(seed, people, background)
    rng = random.Random(f"{seed}-changes")
    earlier: list[Doc] = []
    later: list[Doc] = []
    others: list[Doc] = []
    questions: list[EvalQuestion] = []
    for key, text in data.facts.items():
        _, pi, relation = key.split("-", 2)
        relation = relation.replace("-", " ")
        if relation not in CHANGING:
            others.append(Doc(key, text))
            continue
        person = QUALITY_PEOPLE[int(pi)]
        template, asked, values = RELATIONS[relation]
        old = rng.choice([v for v in values if template.format(p=person, v=v) != text])
        meta = {"subject": person, "attribute": relation} if labels else {}
        earlier.append(Doc(key, template.format(p=person, v=old), EARLIER_AT, meta))
        later.append(Doc(f"{key}@2", text, LATER_AT, meta))
        split = "dev" if int(pi) < people // 2 else "test"
        for q in asked:
            n = len(questions)
            questions.append(
                EvalQuestion(f"changes-q{n:04d}", "changes", split, "latest",
                             q.format(p=person), (f"{key}@2",), person, None, "current",
                             (key,))
            )  # fmt: skip
    docs = earlier + others + [Doc(f"bg-{i:05d}", c) for i, c in enumerate(data.background)]
    return EvalSet("changes", {"changes": docs + later}, questions)


SETS: dict[str, Callable[..., EvalSet]] = {
    "conv": conv_set,
    "facts": facts_set,
    "changes": changes_set,
}
