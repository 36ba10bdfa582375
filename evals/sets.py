"""The labelled sets the eval asks, in one shape: memories per group (each group is loaded
into a namespace of its own, so a question only searches its own dialogue) and questions.

- `conv`: the generated conversations of evals/data/conv/ (evals/generate.py).
- `realtalk`: ten real chats nobody on this project wrote (../shared/realtalk/, read at eval
  time only, never copied into the repository).
- `facts`: bench/quality.py's set (bench/dataset.py `quality_dataset`): one fact per person
  and relation, a paraphrased question per fact, background noise around them.

A conversational set (conv, realtalk) is loaded in each of two modes, which decide both the
content and the metadata of a turn (`turn_doc`): `docs`, as docs/api.md asks (the turn's text
as said; who said it and its session in the metadata), and `content-only`, a client that
sends "Speaker: text" and no metadata at all. The facts sets have one mode, `docs`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from evals.generate import DATA_DIR

FACTS_SEED = 20260101  # the bench's default seed, so the figures match bench/quality.py's
QUICK_DIALOGUES = ("d01", "d08")  # one dev and one test dialogue
Mode = Literal["docs", "content-only"]
MODES: tuple[Mode, ...] = ("docs", "content-only")


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
    mode: Mode = "docs"
    note: str = ""  # what the report says of the set beyond its description


class Unavailable(Exception):
    """A set whose files are not on this machine: the run goes on without it."""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def turn_doc(
    key: str, speaker: str, text: str, at: str, metadata: dict[str, Any], mode: Mode
) -> Doc:
    """A conversation's turn as the mode sends it: `docs`, the text with `metadata` (which
    holds `speaker` and `session`); `content-only`, "Speaker: text" and no metadata."""
    if mode == "docs":
        return Doc(key, text, at, metadata)
    return Doc(key, f"{speaker}: {text}", at, {})


def conv_set(
    quick: bool = False,
    *,
    mode: Mode = "docs",
    labels: bool = False,
    directory: Path = DATA_DIR,
) -> EvalSet:
    """The metadata of `docs` is {dialogue, session, turn, speaker}. With `labels`, the turns
    of changes.jsonl also carry metadata `subject` and `attribute`, as an agent labelling the
    facts it stores would send them (the service's supersession detector reads them);
    `content-only` sends no metadata, so no labels either."""
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
            doc = turn_doc(t["id"], t["speaker"], t["text"], t["at"], meta, mode)
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
    return EvalSet("conv", groups, questions, mode)


def _changed(evidence: list[str], later: set[str], earlier: set[str]) -> str | None:
    if earlier.intersection(evidence):
        return "earlier"
    if len(evidence) == 1 and evidence[0] in later:
        return "current"
    return None


def facts_set(
    quick: bool = False, *, mode: Mode = "docs", labels: bool = False, seed: int = FACTS_SEED
) -> EvalSet:
    """bench/quality.py's set at its profile's size (full: 40 people, 3,000 background
    memories; quick: 12 and 400). People in the first half are dev, the rest test. Facts
    without speakers or metadata: one mode, `docs`."""
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
    quick: bool = False, *, mode: Mode = "docs", labels: bool = False, seed: int = FACTS_SEED
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


# --- realtalk: real chats (../shared/realtalk/README.md) ------------------------------------

REALTALK_ENV = "HTM_EVAL_REALTALK_DIR"
# ../shared/realtalk/ beside the repository: read at eval time, never copied into it
REALTALK_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "realtalk"
REALTALK_DEV = frozenset(range(1, 6))  # chats 1-5 dev, 6-10 test
REALTALK_QUICK = (4, 10)  # the smallest dev and test chats
CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain"}
Created = Literal["session", "message"]
_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D\s*(\d+)\s*[:;]\s*(\d+)(?:\s*-\s*D\s*(\d+)\s*[:;]\s*(\d+))?")


def realtalk_dir() -> Path:
    return Path(os.environ.get(REALTALK_ENV) or REALTALK_DIR)


def realtalk_evidence(written: list[str], ids: set[str]) -> tuple[str, ...]:
    """The messages a question's evidence names, as its annotator meant them: `D3:12`, but
    also written `D3:12; D4:1`, `D12:3-D12:5` (a range), `D17;39`, `D 2:18` or `D20:6.`. An id
    naming no message of the chat is dropped: the authors' preprocessing left photos out."""
    found: list[str] = []
    for entry in written:
        for m in _EVIDENCE.finditer(entry):
            session, first, session_to, last = m.groups()
            if session_to is None:
                found.append(f"D{session}:{first}")
            elif session_to == session:
                found += [f"D{session}:{i}" for i in range(int(first), int(last) + 1)]
            else:
                found += [f"D{session}:{first}", f"D{session_to}:{last}"]
    return tuple(k for k in dict.fromkeys(found) if k in ids)


def _realtalk_time(text: str) -> datetime:
    return datetime.strptime(text, "%d.%m.%Y, %H:%M:%S").replace(tzinfo=UTC)


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def realtalk_set(
    quick: bool = False,
    *,
    mode: Mode = "docs",
    labels: bool = False,
    directory: Path | None = None,
    created: Created = "session",
) -> EvalSet:
    """Every message of each chat (`Chat_<n>_*.json`, namespace `c<nn>`) is a memory keyed by
    its dia_id; `created_at` is its session's start plus one second a message (`created`
    "session", as the held-out figure was loaded) or the message's own time ("message");
    `docs` metadata is {speaker, session}. A question is asked in its chat, its kind its
    category's name; one without evidence, or whose evidence names only messages the files
    do not hold, is left out. Chats 1-5 are dev, 6-10 test; `quick`, chats 4 and 10.
    No labels: these chats have none."""
    directory = realtalk_dir() if directory is None else directory
    files = sorted(directory.glob("Chat_*.json"), key=lambda p: int(p.name.split("_")[1]))
    if not files:
        raise Unavailable(f"no Chat_*.json in {directory} (or set {REALTALK_ENV})")
    groups: dict[str, list[Doc]] = {}
    questions: list[EvalQuestion] = []
    written = without = unheld = 0
    for path in files:
        n = int(path.name.split("_")[1])
        if quick and n not in REALTALK_QUICK:
            continue
        chat = json.loads(path.read_text(encoding="utf-8"))
        group, split = f"c{n:02d}", "dev" if n in REALTALK_DEV else "test"
        sessions = sorted((int(m[1]), m[0]) for k in chat if (m := _SESSION.fullmatch(k)))
        docs: list[Doc] = []
        for number, name in sessions:
            start = _realtalk_time(chat[f"{name}_date_time"])
            for i, msg in enumerate(chat[name]):
                own = _realtalk_time(msg["date_time"])
                at = start + timedelta(seconds=i) if created == "session" else own
                meta = {"speaker": msg["speaker"], "session": number}
                docs.append(turn_doc(msg["dia_id"], msg["speaker"], msg["clean_text"],
                                     _iso(at), meta, mode))  # fmt: skip
        groups[group] = docs
        ids = {d.key for d in docs}
        for i, q in enumerate(chat["qa"]):
            written += 1
            evidence = realtalk_evidence(q["evidence"], ids)
            if not evidence:
                without += not q["evidence"]
                unheld += bool(q["evidence"])
                continue
            kind = CATEGORIES[q["category"]]
            questions.append(
                EvalQuestion(f"{group}-q{i:03d}", group, split, kind, q["question"], evidence)
            )
    when = "its session's start plus one second a message" if created == "session" else "its own"
    note = (
        f"{len(questions)} of {written} questions asked: {without} without evidence and "
        f"{unheld} whose evidence is only photos the files do not hold are left out; a "
        f"message's created_at is {when}."
    )
    return EvalSet("realtalk", groups, questions, mode, note)


SETS: dict[str, Callable[..., EvalSet]] = {
    "conv": conv_set,
    "facts": facts_set,
    "changes": changes_set,
    "realtalk": realtalk_set,
}
# The modes each set is loaded in (the facts sets' memories have no speaker to move).
SET_MODES: dict[str, tuple[Mode, ...]] = {
    "conv": MODES,
    "realtalk": MODES,
    "facts": ("docs",),
    "changes": ("docs",),
}
