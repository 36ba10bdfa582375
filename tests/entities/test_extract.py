"""The deterministic extractor (app/entities/extract.py): exact entities, in order, for each
rule, and what must not be extracted."""

from __future__ import annotations

from typing import Any

import pytest

from app.entities.extract import MAX_ENTITIES, Entity, extract, normalise


def keys(content: str, metadata: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    return [(e.key, e.kind) for e in extract(content, metadata or {})]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Carla went home.", [("carla", "name")]),
        (
            "I met Ana at the Louvre in Paris.",
            [("ana", "name"), ("louvre", "name"), ("paris", "name")],
        ),
        ("Yesterday Carla Silva called.", [("carla silva", "name")]),
        ("He works at the Bank of America now.", [("bank of america", "name")]),
        ("We crossed the Vasco da Gama bridge.", [("vasco da gama", "name")]),
        ("They moved to New York City.", [("new york city", "name")]),
        ("The Great Wall is long.", [("great wall", "name")]),
        ("The Beatles played.", [("beatles", "name")]),
        ("Ana's dog likes James' cat.", [("ana", "name"), ("james", "name")]),
        ("Ana’s bike", [("ana", "name")]),
        ("Jean-Luc and Zoë came.", [("jean-luc", "name"), ("zoë", "name")]),
        ("Ask McDonald about O'Brien.", [("mcdonald", "name"), ("o'brien", "name")]),
        ("Hey Ana, thanks Bob!", [("ana", "name"), ("bob", "name")]),
        ("Carla Friday", [("carla", "name")]),
        ("Carla and Ana", [("carla", "name"), ("ana", "name")]),
        ("Carla, Ana", [("carla", "name"), ("ana", "name")]),
        ("Mr. Smith phoned Dr Who.", [("smith", "name")]),
        ("Ana met ana and ANA.", [("ana", "name")]),
        ("Carla\nSilva", [("carla", "name"), ("silva", "name")]),
        ("Carla  Silva", [("carla", "name"), ("silva", "name")]),
        ("Pottery is fun.", [("pottery", "name")]),
    ],
)
def test_names_are_runs_of_capitalised_words(content: str, expected: list[tuple[str, str]]) -> None:
    assert keys(content) == expected


@pytest.mark.parametrize(
    "content",
    [
        "",
        "all lowercase text about ana",
        "I think so. OK, NASA and the USA. iPhone, eBay.",
        "Monday, Tuesday and Sunday in January, March and December.",
        "Yes! Yeah. Oh wow. Hi. Hello there. Thanks! Sorry.",
        "The end. This is it. That was that. What now? Why not? How so?",
        "Last Friday. Next week. Good morning. Great!",
        "I'm here. Don't go. It's fine. Didn't. We'll see. You're right.",
        "Honestly, seriously, hopefully. Actually no.",
        "Mom and Dad said God knows.",
        "follow-up 24-7 e-2 mp3 x-1 abc-12",
    ],
)
def test_no_entity_in_stop_words_lowercase_and_all_caps(content: str) -> None:
    assert keys(content) == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("INC-48213 is open.", [("inc-48213", "code")]),
        ("Project Zephyrine-7 shipped.", [("project", "name"), ("zephyrine-7", "code")]),
        ("COVID-19 and Covid-19", [("covid-19", "code")]),
        ("ticket ABC-12-rc1? no: ABC-12", [("abc-12-rc1", "code"), ("abc-12", "code")]),
        ("Ab-3x", [("ab-3x", "code")]),
        ("Zephyrine-7's launch", [("zephyrine-7", "code")]),
    ],
)
def test_codes_are_hyphenated_with_a_digit_and_an_uppercase_letter(
    content: str, expected: list[tuple[str, str]]
) -> None:
    assert keys(content) == expected


def test_the_speaker_comes_first_as_a_person_and_is_not_repeated() -> None:
    assert keys("Carla told Ana about INC-7", {"speaker": "Ana"}) == [
        ("ana", "person"),
        ("carla", "name"),
        ("inc-7", "code"),
    ]
    assert keys("hi", {"speaker": "Ana Silva"}) == [("ana silva", "person")]


@pytest.mark.parametrize("speaker", [None, "", 7, ["Ana"], "x" * 101, True])
def test_a_speaker_that_is_no_name_is_not_an_entity(speaker: object) -> None:
    assert keys("hello", {"speaker": speaker}) == []


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Ana", "ana"),
        ("ANA", "ana"),
        ("Ana's", "ana"),
        ("Ana’S", "ana"),
        ("James'", "james"),
        ("  Carla   Silva ", "carla silva"),
        ("Zoë", "zoë"),
        ("Ｃａｒｌａ", "carla"),  # NFKC: full-width letters
        ("Straße", "strasse"),  # case folding, not lowering
        ("'s", ""),
    ],
)
def test_normalise(name: str, key: str) -> None:
    assert normalise(name) == key


def test_at_most_max_entities_in_order_of_appearance() -> None:
    names = [f"Name{chr(65 + i // 26)}{chr(97 + i % 26)}" for i in range(MAX_ENTITIES + 5)]
    found = extract(", ".join(names), {"speaker": "Ana"})
    assert len(found) == MAX_ENTITIES
    assert found[0] == Entity("ana", "person")
    assert [e.key for e in found[1:]] == [n.casefold() for n in names[: MAX_ENTITIES - 1]]


def test_a_name_over_100_characters_is_dropped() -> None:
    long = "A" + "a" * 100
    assert keys(f"{long} met Ana") == [("ana", "name")]
