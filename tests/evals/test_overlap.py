from __future__ import annotations

from evals.overlap import content_words, shared_words


def test_content_words_drop_stopwords_and_fold_simple_suffixes() -> None:
    assert content_words("Mia moved to Lisbon; the dogs were moving") == {
        "mia", "mov", "lisbon", "dog",
    }  # fmt: skip


def test_shared_words_count_the_speakers_name() -> None:
    q = "Does Mia have any animals?"
    assert shared_words(q, "Mia: we finally brought home a beagle puppy") == {"mia"}
    assert shared_words(q, "Mia: the animal shelter called") == {"mia", "animal"}
