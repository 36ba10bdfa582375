"""The entities a memory names, found without a model: deterministic, so a test can pin
exactly what each text yields.

The rule, in order:

1. **person**: the memory's speaker (metadata `speaker`, as app/conversation.py reads it).
2. **code**: a token of letters and digits joined by hyphens whose first part is at least
   two letters and a later part starts with a digit, with an uppercase letter somewhere
   ("INC-48213", "Zephyrine-7", "COVID-19"; not "follow-up", "24-7", "e-2", "mp3").
3. **name**: a run of capitalised words (an uppercase letter, then at least one lowercase
   letter somewhere: "Ana", "McDonald", "Jean-Luc"; not "I", "OK", "NASA", "iPhone"), on one
   line, separated by single spaces or joined by a lowercase connector between two of them
   ("Bank of America", "Vasco da Gama"). A stop word (`STOP_WORDS`: pronouns, determiners,
   question words, auxiliaries, interjections, days, months, titles, common sentence
   openers such as "Honestly", "Sounds", "Thanks") is never a name, and is trimmed off either
   end of a run ("The Beatles" → beatles, "Last Friday" → nothing); a stop word after a name
   ends its run ("Carla Friday" → carla). A leading word (`LEADING_WORDS`: "New", "Great",
   "Last"...) may begin a name ("New York") but is trimmed off its end, so is none alone.
   A contraction ("I'm", "Don't") is a stop word when its part before the apostrophe is
   one. There is no sentence rule beyond that: a sentence opened by a word outside the
   list ("Pottery is fun") names it.

Each entity is normalised (`normalise`): NFKC, a possessive taken off ("Ana's", "James'"),
spaces collapsed, case folded (accents kept: "Zoë" is not "Zoe"). That is its key, what the
database stores (`memory.entities`, migration 0026) and what filters match; a namespace's
aliases ("annie" → "ana") are applied when reading (app/entities/repository.py), so setting
one takes effect for memories already stored. At most `MAX_ENTITIES` per memory, the speaker
first, then in order of first appearance; keys longer than `MAX_ENTITY_CHARS` are dropped.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from app.conversation import speaker_of

Kind = Literal["person", "name", "code"]
KINDS: tuple[Kind, ...] = ("person", "name", "code")
MAX_ENTITIES = 32
MAX_ENTITY_CHARS = 100


@dataclass(frozen=True)
class Entity:
    key: str  # normalised: what is stored and matched
    kind: Kind


_WORDS = """
i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his
himself she her hers herself it its itself they them their theirs themselves one someone
somebody something anyone anybody anything everyone everybody everything nobody nothing
a an the this that these those there here such other another each every either neither
both all any some no none many much more most few several own same
and or but nor so yet for because since although though while whereas if unless until
when where why how what which who whom whose whatever whenever wherever however
as at by from in into of off on onto out over to up with within without about above
after against along among around before behind below beneath beside between beyond
despite down during except inside like near outside past per through throughout toward
towards under underneath unlike upon via
am is are was were be been being do does did done doing have has had having will would
shall should can could may might must let lets ought need
not yes yeah yep yup nope no ok okay oh ooh ah aha hey hi hello hiya howdy bye goodbye
thanks thank please sorry well wow whoa hmm um uh huh lol omg haha hah cheers congrats
congratulations welcome sure nice cool awesome amazing wonderful fantastic
perfect fine right true exactly absolutely definitely totally indeed anyway anyways
also just really actually maybe perhaps probably still even only again already always
never often sometimes usually then now soon later today tonight tomorrow yesterday
morning afternoon evening night week weekend month year
monday tuesday wednesday thursday friday saturday sunday
january february march april june july august september october november december
jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun
mr mrs ms miss dr prof sir madam mister
glad happy sad love loved hope hoped think thought know knew guess wish want wanted
got get getting go going went gone come coming came make made take took see saw look
looking looks said say says tell told ask asked try tried keep kept feel felt sounds
sound seems seem let's wait remember imagine check note
don doesn didn isn aren wasn weren won wouldn shouldn couldn can't cannot haven hasn
hadn ain mustn needn
honestly seriously hopefully basically literally luckily unfortunately fortunately obviously
apparently personally recently finally currently suddenly certainly clearly especially
generally mostly normally surely simply lately eventually initially
planning thinking trying working hoping having being doing saying wondering feeling
guys bro dude man girl god gosh yay aww mom dad mum mommy daddy grandma grandpa
""".split()
STOP_WORDS: frozenset[str] = frozenset(_WORDS)
# Words that begin names ("New York", "Great Wall", "Little Rock") but are no name alone or
# at a name's end ("Last Friday" → nothing).
LEADING_WORDS: frozenset[str] = frozenset(
    """new old big small little long short high low early late best better first second
    third last next great good north south east west upper lower saint san santa""".split()
)
# Lowercase words that may join two capitalised words of one name.
CONNECTORS: frozenset[str] = frozenset({"of", "de", "da", "do", "dos", "das", "del", "van", "von"})

_APOSTROPHES = "'’"
_CODE = re.compile(
    r"(?<![\w-])([^\W\d_]{2,}[^\W_]*(?:-[^\W_]+)*?-\d[^\W_]*(?:-[^\W_]+)*)(?![\w-])",
)
_HYPHEN_DIGIT = re.compile(r"-\d")  # in every code: most texts need no code search
# A word: letters (and digits after the first), inner hyphens and apostrophes; a trailing
# apostrophe after an s (the plural possessive "James'").
_WORD = re.compile(rf"[^\W\d_][^\W_]*(?:[-{_APOSTROPHES}][^\W_]+)*(?:(?<=[sS])[{_APOSTROPHES}])?")
_POSSESSIVE = re.compile(rf"(?:[{_APOSTROPHES}][sS]|(?<=[sS])[{_APOSTROPHES}])$")


def normalise(name: str) -> str:
    """The key of a name: NFKC, a possessive taken off, spaces collapsed, case folded."""
    text = " ".join(unicodedata.normalize("NFKC", name).split())
    return _POSSESSIVE.sub("", text).casefold()


def extract(content: str, metadata: Mapping[str, Any]) -> list[Entity]:
    """The memory's entities by the module's rule: the speaker, then codes and names in
    order of first appearance, each key once (its first kind)."""
    found: dict[str, Kind] = {}
    seen: set[str] = set()  # the names as written already taken (or refused)

    def take(name: str, kind: Kind) -> None:
        if name in seen:
            return
        seen.add(name)
        key = normalise(name)
        if key and len(key) <= MAX_ENTITY_CHARS and key not in found:
            found[key] = kind

    speaker = speaker_of(dict(metadata))
    if speaker is not None:
        take(speaker, "person")
    codes: list[tuple[int, str, Kind]] = []
    parts, last = [], 0  # the text with each code blanked out, so no name is read in it
    for m in _CODE.finditer(content) if "-" in content and _HYPHEN_DIGIT.search(content) else ():
        if any(c.isupper() for c in m.group(1)):
            codes.append((m.start(), m.group(1), "code"))
            parts += [content[last : m.start()], " " * (m.end() - m.start())]
            last = m.end()
    masked = "".join([*parts, content[last:]]) if parts else content
    names = ((start, name, "name") for start, name in _names(masked))
    # In order of appearance, lazily: a long text stops being read at MAX_ENTITIES.
    for _, name, kind in heapq.merge(codes, names, key=lambda s: s[0]):
        if len(found) >= MAX_ENTITIES:
            break
        take(name, kind)  # type: ignore[arg-type]
    return [Entity(k, v) for k, v in found.items()]


@lru_cache(maxsize=65536)
def _capitalised(word: str) -> bool:
    return word[0].isupper() and any(c.islower() for c in word)


@lru_cache(maxsize=65536)
def _stop(word: str, also: frozenset[str] = frozenset()) -> bool:
    """A stop word (or one of `also`), in any case, possessive or contracted ("I'm" → i,
    "Don't" → don)."""
    folded = normalise(word)
    if folded in STOP_WORDS or folded in also:
        return True
    base = re.split(f"[{_APOSTROPHES}]", folded, maxsplit=1)[0]
    return base != folded and base in STOP_WORDS


def _names(text: str) -> Iterator[tuple[int, str]]:
    """(start, name) of each run of capitalised words, trimmed of stop words, in order."""
    out: list[tuple[int, str]] = []
    run: list[tuple[int, str]] = []  # (start, word) of the run's capitalised words and joins

    def close() -> None:
        while run and (not _capitalised(run[-1][1]) or _stop(run[-1][1], LEADING_WORDS)):
            run.pop()
        while run and (not _capitalised(run[0][1]) or _stop(run[0][1])):
            run.pop(0)
        if run:
            start, end_word = run[0][0], run[-1]
            out.append((start, text[start : end_word[0] + len(end_word[1])]))
        run.clear()

    previous_end = -1
    for m in _WORD.finditer(text):
        word, start = m.group(0), m.start()
        if not run and not word[0].isupper():  # the common case: no run, a lowercase word
            previous_end = m.end()
            continue
        joined = run and start - previous_end == 1 and text[previous_end] == " "
        if _capitalised(word) and not (_stop(word) and run and not _stop(run[-1][1])):
            if not joined:
                close()
            run.append((start, word))
        elif joined and word in CONNECTORS:
            run.append((start, word))
        else:
            close()
        previous_end = m.end()
        if out:
            yield from out
            out.clear()
    close()
    yield from out
