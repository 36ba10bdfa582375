"""app/conversation.py: the speakers a question names, and the question without them."""

from app.conversation import mentions, named_in, speaker_tag, without_names

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


def test_a_word_of_a_longer_name_names_its_speaker_when_no_other_has_it() -> None:
    speakers = ["Fahim Khan", "Ann Lee", "Ann", "Akib"]
    q = "Did Fahim visit Khan's mother with Lee or fahim?"
    assert mentions(q, speakers) == [
        ("Fahim Khan", 4, 9), ("Fahim Khan", 16, 22), ("Ann Lee", 35, 38),
    ]  # fmt: skip
    # "Ann" is a speaker of its own and a word of "Ann Lee": the whole name only.
    assert named_in("What did Ann say?", speakers) == ["Ann"]
    assert without_names(q, ["Fahim Khan"]) == "Did visit mother with Lee or fahim?"


def test_a_name_spelt_otherwise_names_the_nearest_speaker() -> None:
    speakers = ["Fahim Khan", "Muhhamed", "Akib", "Emi", "Marta", "Marty"]
    assert named_in("What does Muhammad like?", speakers) == ["Muhhamed"]
    assert named_in("Why did Aqib call Mohammed?", speakers) == ["Muhhamed", "Akib"]
    assert named_in("What does Faheem cook?", speakers) == ["Fahim Khan"]
    # Too short to spell otherwise, a question's own words, a lowercase word, another first
    # letter, too far, or as near to two speakers: nobody.
    for q in ["Where did Emily go?", "When did Which happen?", "what does muhammad like?",
              "Did Kahim come?", "Did Monday come?", "Did Marti come?"]:  # fmt: skip
        assert named_in(q, speakers) == [], q
    assert named_in("Did Martha come?", speakers) == ["Marta"]
