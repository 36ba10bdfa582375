"""Tokenizer.count_joined: the count of parts joined by a blank line from the parts' own
counts, equal to encoding the joined text, also where BPE merges across the join (a part
ending in punctuation, spaces or newlines; one starting with whitespace or "/")."""

from __future__ import annotations

import random

import pytest

from app.tokens import BLANK_LINE, Tokenizer

ENCODINGS = ("cl100k_base", "o200k_base")
# Pieces chosen to sit on every rule of the two patterns: words, contractions, digit runs,
# punctuation that takes newlines (and o200k_base's "/"), whitespace of every kind, marks,
# letters and symbols outside ASCII.
PIECES = [
    "deploy", "Staging", "ÉTÉ", "naïve", "x", "I", "'s", "'LL", "'", "n't", "123", "45678", "٣",
    "²", ".", "...", "?!", ":", "/", "//", "-", "—", "(", ")", "\"", "`", "#", "<|endoftext|>",
    " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x1c",
    "\u0301", "e\u0301", "\u200d", "漢字", "。", "！", "🙂", "👍🏽", "\x00", "\ufffd",
]  # fmt: skip


@pytest.fixture(scope="module", params=ENCODINGS)
def tokenizer(request: pytest.FixtureRequest) -> Tokenizer:
    t = Tokenizer.load(request.param)
    assert t.ready and t._joins, t.error
    return t


def exact(t: Tokenizer, parts: list[str]) -> int:
    return t.count(BLANK_LINE.join(parts))


def joined(t: Tokenizer, parts: list[str]) -> int:
    return t.count_joined(parts, [t.count(p) for p in parts])


@pytest.mark.parametrize(
    "parts",
    [
        ["Working memory:", "Alice prefers window seats.", "Lisbon trams are yellow"],
        ["ends in a space ", "ends in two  ", "ends in a newline\n", "and\n\n", "last"],
        ["a", " starts with a space", "\nstarts with a newline", "/starts with a slash", "b"],
        ["it's", "'s", "dogs'", "'tis", "x"],  # "'" after a word, o200k_base's contractions
        ["café\u0301", "e\u0301.", "1.", "2)", "漢字。", "ok🙂", "tail \u00a0"],
        ["", "x", "", "", "y", ""],  # empty parts
        ["...", "!!!", "?", "\n", " ", "\t"],  # no letter or digit at all
        ["one"],
        [],
    ],
)
def test_joined_count_equals_encoding_the_joined_text(
    tokenizer: Tokenizer, parts: list[str]
) -> None:
    assert joined(tokenizer, parts) == exact(tokenizer, parts)


def test_joined_count_on_random_parts_equals_encoding_the_joined_text(
    tokenizer: Tokenizer,
) -> None:
    rng = random.Random(20261126)
    for _ in range(3000):
        parts = [
            "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6)))
            for _ in range(rng.randint(1, 6))
        ]
        assert joined(tokenizer, parts) == exact(tokenizer, parts), parts


def test_a_join_after_a_full_stop_is_not_the_sum_of_the_counts(tokenizer: Tokenizer) -> None:
    # Why the rule exists: ".\n\n" is one piece (and one token), so the sum of the parts'
    # counts plus one per blank line is wrong here, and count_joined is not.
    parts = ["Alice prefers window seats.", "Lisbon trams are yellow."]
    summed = sum(tokenizer.count(p) for p in parts) + tokenizer.count(BLANK_LINE)
    assert exact(tokenizer, parts) == summed - 1
    assert joined(tokenizer, parts) == exact(tokenizer, parts)


def test_an_encoding_of_another_pattern_encodes_the_joined_text() -> None:
    t = Tokenizer.load("cl100k_base")
    t._joins = False  # as for an encoding whose pattern count_joined was not derived from
    parts = ["ends in a space ", "x."]
    assert t.count_joined(parts, [0, 0]) == exact(t, parts)
