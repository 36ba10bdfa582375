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
    quick: bool = False, directory: Path = DATA_DIR, content: ContentStyle = "prefixed"
) -> EvalSet:
    keep = set(QUICK_DIALOGUES) if quick else None
    groups: dict[str, list[Doc]] = {}
    for t in _jsonl(directory / "turns.jsonl"):
        if keep is None or t["dialogue"] in keep:
            meta = {k: t[k] for k in ("dialogue", "session", "turn", "speaker")}
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
        )
        for q in _jsonl(directory / "questions.jsonl")
        if keep is None or q["dialogue"] in keep
    ]
    return EvalSet("conv", groups, questions)


def facts_set(
    quick: bool = False, seed: int = FACTS_SEED, content: ContentStyle = "prefixed"
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


SETS: dict[str, Callable[..., EvalSet]] = {"conv": conv_set, "facts": facts_set}
