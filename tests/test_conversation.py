"""app/conversation.py: the speakers a question names, and the question without them."""

from app.conversation import named_in, speaker_tag, without_names

SPEAKERS = ["Mia", "Leo", "Ann", "Ann Lee"]


def test_names_are_whole_words_in_any_case_with_a_possessive() -> None:
    q = "What does MIA's sister do? Miami is nice. Ann Lee met Ann."
    assert named_in(q, SPEAKERS) == ["Mia", "Ann", "Ann Lee"]
    assert without_names(q, SPEAKERS) == "What does sister do? Miami is nice. met ."


def test_a_question_that_is_only_a_name_is_kept() -> None:
    assert without_names("Leo?", SPEAKERS) == "Leo?"
    assert named_in("nobody here", SPEAKERS) == []
    assert without_names("Mia and Leo", []) == "Mia and Leo"


def test_a_speakers_tag_is_in_the_tag_alphabet() -> None:
    assert speaker_tag("Ann Lee") == "speaker:ann-lee"
    assert speaker_tag("José") == "speaker:jose"
    assert speaker_tag("!!!") is None
