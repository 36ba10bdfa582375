"""The eval's facts that change: the generator's changes.jsonl, the `changes` set, labelled
facts loaded alone, R@1 and "stale value first"."""

from __future__ import annotations

from evals.metrics import Outcome, breakdown, stale_above
from evals.runner import Config, _batches, request_body
from evals.sets import Doc, changes_set, conv_set


def outcome(ranked: tuple[str, ...], changed: str | None = "current") -> Outcome:
    return Outcome("latest", "dev", ("new",), ranked, 0.01, changed=changed, stale=("old",))


def test_stale_first_and_recall_at_1() -> None:
    cases = {
        ("new", "old"): False,
        ("old", "new"): True,
        ("old",): True,  # the stale value without the current one
        ("x",): False,
        ("x", "new", "y", "old"): False,
    }
    for ranked, stale in cases.items():
        assert stale_above(outcome(ranked)) is stale, ranked
    out = breakdown([outcome(r) for r in cases] + [outcome(("new",), changed=None)])
    assert out["all"]["recall_at_1"] == 2 / 6
    current = out["changed"]["current"]
    assert (current["questions"], current["recall_at_1"], current["stale_above"]) == (5, 0.2, 0.4)


def test_the_changes_set_holds_each_earlier_value_before_the_current_one() -> None:
    s = changes_set(quick=True, labels=True)
    docs = s.groups["changes"]
    keys = [d.key for d in docs]
    assert len(s.questions) == 12 * 3 * 2  # people × relations × questions
    for q in s.questions:
        [current] = q.evidence
        [old] = q.stale
        assert current == old + "@2"
        assert keys.index(old) < keys.index(current)
        a, b = docs[keys.index(old)], docs[keys.index(current)]
        assert a.content != b.content and a.metadata == b.metadata
        assert set(a.metadata) == {"subject", "attribute"} and a.metadata["subject"] == q.speaker
    assert changes_set(quick=True).groups["changes"][0].metadata == {}


def test_conv_labels_only_the_changed_facts_turns_and_marks_their_questions() -> None:
    plain, labelled = conv_set(quick=True), conv_set(quick=True, labels=True)
    docs = [d for g in labelled.groups.values() for d in g]
    tagged = [d.key for d in docs if "attribute" in d.metadata]
    assert len(tagged) == 12  # d01 and d08: six changed facts, two turns each
    assert all("attribute" not in d.metadata for g in plain.groups.values() for d in g)
    kinds = {q.changed for q in labelled.questions}
    assert kinds == {None, "current", "earlier"}
    for q in labelled.questions:
        if q.changed == "current":
            assert len(q.evidence) == 1 and q.stale and set(q.stale) <= set(tagged)


def test_a_labelled_fact_is_loaded_in_a_batch_of_its_own() -> None:
    docs = [Doc(f"k{i}", "x") for i in range(250)]
    docs[120] = Doc("f", "x", metadata={"attribute": "job"})
    sizes = [[d.key for d in b] for b in _batches(docs)]
    assert [len(b) for b in sizes] == [100, 20, 1, 100, 29]
    assert sizes[2] == ["f"]


def test_a_speaker_placeholder_is_filled_at_any_depth() -> None:
    config = Config("s", {"filters": {"metadata": {"subject": "{speaker}"}}})
    body = request_body(config, "Where does Ana live?", speaker="Ana")
    assert body["filters"] == {"metadata": {"subject": "Ana"}}
