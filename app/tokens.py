"""Token counting with tiktoken, loaded once at start.

tiktoken downloads its BPE file on first use; offline it reads TIKTOKEN_CACHE_DIR. Loading
happens in the lifespan so a missing file is reported at start and in /readyz, not inside
a request.
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

BLANK_LINE = "\n\n"

# The pre-tokenizer patterns (tiktoken 0.14's cl100k_base and o200k_base) that count_joined's
# rule was derived from; under any other pattern a joined text is encoded whole.
_CL100K = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"
    r"|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
)
_O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
JOIN_PATTERNS = frozenset({_CL100K, _O200K})
# Tails longer than this are encoded each time rather than remembered.
MAX_TAIL_CHARS = 64
MAX_TAILS = 4096

# Texts longer than this (in characters, summed for count_many) are counted in a worker
# thread: tiktoken releases the GIL while it encodes, so the event loop keeps serving other
# requests. The threshold is where encoding starts to cost more than the hop to a thread
# (bench/README.md, "Figures behind the code").
THREAD_THRESHOLD_CHARS = 4096


@dataclass
class Tokenizer:
    encoding_name: str
    _encoding: object | None = None
    error: str | None = None
    # count_joined's rule holds for this encoding's pre-tokenizer (JOIN_PATTERNS).
    _joins: bool = False
    # What a blank line followed by more text adds after a tail (count_joined), by tail.
    _tails: dict[str, int] = field(default_factory=dict)

    # A tokenizer made with `load(..., lazy=True)` reads its BPE file on first use.
    _pending: bool = False

    @classmethod
    def load(cls, encoding_name: str, *, lazy: bool = False) -> Tokenizer:
        """`lazy`: read the BPE file (~0.3 s) on the first count, not now: the `htm`
        commands that count no tokens (keys, stats) never read it."""
        tokenizer = cls(encoding_name, _pending=True)
        if not lazy:
            tokenizer._loaded()
        return tokenizer

    def _loaded(self) -> object | None:
        """The encoding, read now if it was deferred (None when it could not be)."""
        if self._pending:
            self._pending = False
            try:
                import tiktoken

                enc = tiktoken.get_encoding(self.encoding_name)
                enc.encode("warm up")
                self._encoding, self._joins = enc, enc._pat_str in JOIN_PATTERNS
            except Exception as exc:  # network error, unknown name, bad cache file
                self.error = (
                    f"tiktoken encoding {self.encoding_name!r} could not be loaded ({exc}); "
                    "offline, set TIKTOKEN_CACHE_DIR to a folder holding its BPE file"
                )
                log.error(self.error)
        return self._encoding

    @property
    def ready(self) -> bool:
        return self._loaded() is not None

    def count(self, text: str) -> int:
        enc = self._loaded()
        if enc is None:
            from app.errors import ServiceUnavailable

            raise ServiceUnavailable(self.error or "tokenizer not loaded", dependency="tokenizer")
        # disallowed_special=() : memories may legitimately contain "<|endoftext|>" text.
        return len(enc.encode(text, disallowed_special=()))  # type: ignore[attr-defined]

    def count_joined(self, parts: Sequence[str], counts: Sequence[int]) -> int:
        """count(BLANK_LINE.join(parts)) from count(part) of each part (`counts`), encoding
        only where BPE can merge across a join; exact, with no encoding of the parts.

        tiktoken splits a text into pieces with its pattern and encodes each piece alone, so
        a join changes the count only through the pieces it changes. Under JOIN_PATTERNS:

        - a piece holding a newline never goes on past it into a character that is not
          whitespace (or, in o200k_base, "/"): when the next part starts with one, a new
          piece starts with it, and that part and everything after it are split as if alone
          (the patterns look nowhere behind);
        - a part's pieces up to its last letter or digit do not change when text follows,
          if the character after that letter or digit is punctuation, a symbol, whitespace
          or a control character other than "'" (it can extend neither a word nor a number,
          nor start o200k_base's "'s"): only the tail after it meets the blank line.

        So a part followed by a blank line and a clean start adds count(part) plus
        count(tail + BLANK_LINE + "x") - 1 - count(tail), remembered by tail; parts joined to
        a part that does not start clean are encoded together.
        """
        if not parts:
            return 0
        self._loaded()  # _joins is known once the encoding is
        if not self._joins:
            return self.count(BLANK_LINE.join(parts))
        total, i, n = 0, 0, len(parts)
        tails = self._tails
        while i < n:
            j = i + 1
            while j < n and not _starts_clean(parts[j]):
                j += 1
            if j == i + 1:
                segment, tokens = parts[i], counts[i]
            else:
                segment = BLANK_LINE.join(parts[i:j])
                tokens = self.count(segment)
            total += tokens
            if j < n:
                # Most parts end in a word and one ASCII mark ("…seats."): their tail without
                # the scan of _tail().
                end = segment[-2:]
                if len(end) == 2 and end.isascii() and end[0].isalnum() and end[1] != "'":
                    tail = "" if end[1].isalnum() else end[1]
                else:
                    tail = _tail(segment)
                added = tails.get(tail)
                total += self._blank_line_after(tail) if added is None else added
            i = j
        return total

    def _blank_line_after(self, tail: str) -> int:
        added = self._tails.get(tail)
        if added is None:
            added = self.count(tail + BLANK_LINE + "x") - 1 - self.count(tail)
            if len(tail) <= MAX_TAIL_CHARS:
                if len(self._tails) >= MAX_TAILS:
                    self._tails.clear()
                self._tails[tail] = added
        return added

    async def count_async(self, text: str) -> int:
        """count(), off the event loop when the text is large (THREAD_THRESHOLD_CHARS)."""
        if self._loaded() is None or len(text) <= THREAD_THRESHOLD_CHARS:
            return self.count(text)
        return await asyncio.to_thread(self.count, text)

    async def count_many_async(self, texts: list[str]) -> list[int]:
        """count_many(), off the event loop when the texts are large together."""
        if self._loaded() is None or sum(map(len, texts)) <= THREAD_THRESHOLD_CHARS:
            return self.count_many(texts)
        return await asyncio.to_thread(self.count_many, texts)

    def count_many(self, texts: list[str]) -> list[int]:
        # One by one, not tiktoken's encode_batch: that starts a pool of 8 threads on every
        # call, which cost 42.7 ms of CPU for 500 memories of ~85 characters against 4.3 ms
        # for this loop (bench/README.md, "Figures behind the code").
        return [self.count(t) for t in texts]


def _word(c: str) -> bool:
    """A letter or a digit (\\p{L} or \\p{N}): categories of assigned characters, stable."""
    return c.isalnum() if c.isascii() else unicodedata.category(c)[0] in "LN"


def _ends_word(c: str) -> bool:
    """After a letter or digit, ends its piece whatever follows: neither a letter, digit or
    mark (which a word's piece takes in) nor "'" (o200k_base's "'s" after a word)."""
    if c.isascii():
        return c != "'"
    cat = unicodedata.category(c)
    return cat[0] in "PSZ" or cat == "Cc"


def _tail(text: str) -> str:
    """The end of `text` that a following blank line can re-split (see count_joined): after
    its last letter or digit, or all of it when no such boundary is certain."""
    k = len(text)
    while k and not _word(text[k - 1]):
        k -= 1
    if k == len(text):
        return ""
    if k == 0 or not _ends_word(text[k]):
        return text
    return text[k:]


def _starts_clean(part: str) -> bool:
    """Starts with a character that no piece holding the blank line before it can take in."""
    return bool(part) and not part[0].isspace() and part[0] != "/"
