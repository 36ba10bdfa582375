"""The extractive summary of evicted memories: exact contents, by importance, within tokens."""

from __future__ import annotations

from app.summaries.extract import HEADER, Evicted, digest, summarize


def words(text: str) -> int:
    """A stand-in token count: one per word (the summariser takes any counter)."""
    return len(text.split())


def test_sentences_are_taken_by_importance_and_written_in_eviction_order() -> None:
    evicted = [
        Evicted("a", "Lunch was at noon. The cafe was busy.", 1.0),
        Evicted("b", "Staging runs PostgreSQL 18! Backups run nightly.", 9.0),
        Evicted("c", "Priya is on call", 5.0),
    ]
    header = HEADER.format(n=3)  # 8 words
    # 8 + b's two sentences (4 + 3) + c's (4) = 19; a's first (4) would make 23
    s = summarize(evicted, 21, words)
    assert s is not None
    assert s.content == header + "Staging runs PostgreSQL 18! Backups run nightly. Priya is on call"
    assert (s.sources, s.importance) == (["a", "b", "c"], 9.0)
    assert words(s.content) == 19


def test_a_sentence_that_does_not_fit_is_skipped_and_a_shorter_one_follows() -> None:
    evicted = [
        Evicted("long", "This sentence is far too long to fit in the little budget left.", 9.0),
        Evicted("short", "Keep this.", 1.0),
    ]
    s = summarize(evicted, 10, words)
    assert s is not None and s.content == HEADER.format(n=2) + "Keep this."


def test_nothing_evicted_or_nothing_fitting_writes_no_summary() -> None:
    assert summarize([], 100, words) is None
    assert summarize([Evicted("k", "four words right here", 1)], 9, words) is None


def test_a_digest_takes_every_texts_first_sentence_before_any_second_one() -> None:
    texts = [
        "Ana flies on Friday. She packs light. She hates queues.",
        "The office opens at nine! It closes at five.",
        "Trams are yellow",
    ]
    # Firsts: 4 + 5 + 3 = 12 words; then "She packs light." (3) makes 15; "It closes at
    # five." (4) would make 19 and is skipped; "She hates queues." (3) makes 18.
    assert digest(texts, 18, words) == (
        "Ana flies on Friday. She packs light. She hates queues. The office opens at nine! "
        "Trams are yellow",
        [0, 1, 2],
    )
    assert digest(texts, 8, words) == ("Ana flies on Friday. Trams are yellow", [0, 2])
    assert digest(texts, 2, words) is None
    assert digest([], 100, words) is None
