"""The generated conversational set: reproducible byte for byte, and as large and as well
labelled as the eval promises."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

import pytest

from evals.generate import DATA_DIR, FILES, render
from evals.overlap import content_words, shared_words

KINDS = {
    "single", "latest", "multi_hop", "temporal", "paraphrase", "synonym", "inverted", "speaker",
    "names",
}  # fmt: skip


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA_DIR / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    turns = _rows("turns.jsonl")
    return {
        "dialogues": _rows("dialogues.jsonl"),
        "turns": {t["id"]: t for t in turns},
        "turn_list": turns,
        "questions": _rows("questions.jsonl"),
    }


def _at(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_regenerating_the_set_gives_the_committed_files_byte_for_byte() -> None:
    rendered = render()
    assert sorted(rendered) == sorted(FILES)
    for name, text in rendered.items():
        assert (DATA_DIR / name).read_bytes() == text.encode("utf-8"), name


def test_the_set_has_ten_or_more_dialogues_of_200_or_more_turns(data: dict[str, Any]) -> None:
    per_dialogue = Counter(t["dialogue"] for t in data["turn_list"])
    assert len(data["dialogues"]) >= 10
    assert sorted(per_dialogue) == [d["id"] for d in data["dialogues"]]
    assert min(per_dialogue.values()) >= 200
    speakers = [s for d in data["dialogues"] for s in d["speakers"]]
    assert len(speakers) == len(set(speakers)) == 2 * len(data["dialogues"])
    for t in data["turn_list"]:
        assert t["speaker"] in data["dialogues"][int(t["dialogue"][1:]) - 1]["speakers"]


def test_each_dialogue_spans_8_to_15_sessions_over_3_to_8_months_of_2025_2026(
    data: dict[str, Any],
) -> None:
    for d in data["dialogues"]:
        starts = [_at(s) for s in d["sessions"]]
        assert 8 <= len(starts) <= 15
        assert starts == sorted(starts)
        assert 2025 <= starts[0].year and starts[-1].year <= 2026
        months = (starts[-1].year - starts[0].year) * 12 + starts[-1].month - starts[0].month
        assert 1 <= months <= 8
        turns = [t for t in data["turn_list"] if t["dialogue"] == d["id"]]
        assert {t["session"] for t in turns} == set(range(len(starts)))
        times = [_at(t["at"]) for t in turns]
        assert times == sorted(times)
        for t in turns:
            assert (
                _at(t["at"]).date() == starts[t["session"]].date()
                or (_at(t["at"]) - starts[t["session"]]).total_seconds() < 6 * 3600
            )


def test_turn_ids_are_unique_and_name_their_dialogue_session_and_turn(
    data: dict[str, Any],
) -> None:
    assert len(data["turns"]) == len(data["turn_list"])
    for t in data["turn_list"]:
        assert t["id"] == f"{t['dialogue']}-s{t['session']:02d}-t{t['turn']:03d}"


def test_there_are_500_or_more_questions_and_60_or_more_of_each_kind(
    data: dict[str, Any],
) -> None:
    qs = data["questions"]
    kinds = Counter(q["kind"] for q in qs)
    assert len(qs) >= 500
    assert set(kinds) == KINDS
    assert min(kinds.values()) >= 60
    assert len({q["id"] for q in qs}) == len(qs)
    for split in ("dev", "test"):
        in_split = Counter(q["kind"] for q in qs if q["split"] == split)
        assert set(in_split) == KINDS and min(in_split.values()) >= 20


def test_the_split_is_by_dialogue(data: dict[str, Any]) -> None:
    split = {d["id"]: d["split"] for d in data["dialogues"]}
    assert set(split.values()) == {"dev", "test"}
    for q in data["questions"]:
        assert q["split"] == split[q["dialogue"]]


def test_every_evidence_turn_exists_in_its_questions_dialogue_and_is_the_speakers(
    data: dict[str, Any],
) -> None:
    for q in data["questions"]:
        assert q["evidence"] and len(set(q["evidence"])) == len(q["evidence"])
        for e in q["evidence"]:
            turn = data["turns"][e]
            assert turn["dialogue"] == q["dialogue"]
            assert turn["speaker"] == q["speaker"]


def test_multi_hop_questions_need_two_or_more_turns(data: dict[str, Any]) -> None:
    multi = [q for q in data["questions"] if q["kind"] == "multi_hop"]
    assert all(len(q["evidence"]) >= 2 for q in multi)
    sessions = [len({data["turns"][e]["session"] for e in q["evidence"]}) for q in multi]
    assert sum(1 for s in sessions if s >= 2) >= 0.9 * len(multi)


def test_temporal_questions_carry_a_range_holding_their_evidence(data: dict[str, Any]) -> None:
    for q in data["questions"]:
        assert ("range" in q) == (q["kind"] == "temporal"), q["id"]
        if "range" in q:
            start, end = _at(q["range"]["start"]), _at(q["range"]["end"])
            assert all(start <= _at(data["turns"][e]["at"]) < end for e in q["evidence"])


def test_paraphrase_questions_share_at_most_one_content_word_with_their_evidence(
    data: dict[str, Any],
) -> None:
    paraphrases = [q for q in data["questions"] if q["kind"] in ("paraphrase", "synonym")]
    for q in paraphrases:
        for e in q["evidence"]:
            t = data["turns"][e]
            shared = shared_words(q["question"], f"{t['speaker']}: {t['text']}")
            assert len(shared) <= 1, (q["question"], t["text"], shared)


def test_names_questions_name_a_token_rare_in_their_dialogue(data: dict[str, Any]) -> None:
    """Each names question holds a word found in at most 3 turns of its dialogue (a codename,
    a ticket, a street, a pet's name): the needle full text should find."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for t in data["turn_list"]:
        counts[t["dialogue"]].update(content_words(t["text"]))
    for q in (q for q in data["questions"] if q["kind"] == "names"):
        words = content_words(q["question"]) - content_words(q["speaker"])
        assert any(0 < counts[q["dialogue"]][w] <= 3 for w in words), q["question"]


def test_inverted_questions_name_no_speaker_and_speaker_questions_name_theirs(
    data: dict[str, Any],
) -> None:
    speakers = {d["id"]: d["speakers"] for d in data["dialogues"]}
    for q in data["questions"]:
        named = [s for s in speakers[q["dialogue"]] if s in q["question"]]
        if q["kind"] == "inverted":
            assert named == [] and q["answer"] == q["speaker"], q["question"]
        elif q["kind"] in ("speaker", "latest", "synonym"):
            assert named == [q["speaker"]], q["question"]


def test_latest_questions_ask_for_one_turn_and_the_speaker_said_something_alike_before(
    data: dict[str, Any],
) -> None:
    """The evidence is the later value's turn; the earlier value is in an earlier turn of the
    same speaker, which a question about what holds now must not be answered with."""
    latest = [q for q in data["questions"] if q["kind"] == "latest"]
    assert len(latest) >= 60
    for q in latest:
        assert len(q["evidence"]) == 1
        turn = data["turns"][q["evidence"][0]]
        assert turn["session"] > 0 or turn["turn"] > 0


def test_speaker_questions_are_about_a_kind_of_fact_the_other_speaker_has_too() -> None:
    """Generated again with the facts at hand: each speaker question's fact type is one the
    other speaker of the dialogue has as well."""
    import random

    from evals import words as w
    from evals.facts import OPTIONAL, Pools, Speaker
    from evals.harder import harder_questions

    rng = random.Random("t")
    pair = (Speaker(*w.SPEAKERS[0]), Speaker(*w.SPEAKERS[1]))
    pools = Pools(rng)
    from evals.facts import plant

    facts = {p.name: {k: plant(k, p, rng, pools) for k in ["job", "move", *OPTIONAL]}
             for p in pair}  # fmt: skip
    del facts[pair[1].name]["pet"]
    for p in pair:  # pretend each line was said, in order
        for f in facts[p.name].values():
            f.turns = [_turn(p.name, line, i) for i, line in enumerate(f.lines)]
    qs = harder_questions(random.Random("q"), pair, facts)
    kinds = Counter(q.kind for q in qs)
    assert set(kinds) == {"latest", "inverted", "speaker", "synonym"}
    assert not any(q.kind == "speaker" and "animal" in q.text for q in qs)


def _turn(speaker: str, text: str, i: int):  # type: ignore[no-untyped-def]
    from datetime import UTC, timedelta

    from evals.facts import Turn

    at = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=i)
    return Turn(f"d01-s{i:02d}-t000", "d01", i, 0, speaker, at, text)
