"""Content words, for the paraphrase questions' word-overlap bound.

A content word is a lower-cased alphanumeric token that is not in a small stopword list,
reduced by a crude suffix strip so "moved" and "move", "dogs" and "dog" count as one word.
Names count: "Mia" in a question and in "Mia: we brought home a beagle" is a shared word.
"""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    """
    a an the and or but if of to in on at for with from by about as into over after before
    up down out off so than then too very just also not no yes is am are was were be been
    being have has had having do does did done doing i me my mine myself we us our ours you
    your yours he him his she her hers they them their theirs it its this that these those
    what which who whom whose when where why how there here can could will would shall should
    may might must any some all each every both either neither more most much many other
    another such own same only now again ever still even well back s t d ll re ve m o
    don didn doesn isn wasn aren weren haven hasn won wouldn couldn shouldn let lets oh
    get gets got getting go goes going gone went one anything something thing things really
    lately recently
    """.split()
)
_TOKEN = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ing", "ies", "ed", "es", "s", "e")


def stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    words = _TOKEN.findall(text.lower().replace("'s ", " ").replace("’s ", " "))
    return {stem(w) for w in words if w not in STOPWORDS}


def shared_words(a: str, b: str) -> set[str]:
    return content_words(a) & content_words(b)
