"""Token counting with tiktoken, loaded once at start.

tiktoken downloads its BPE file on first use; offline it reads TIKTOKEN_CACHE_DIR. Loading
happens in the lifespan so a missing file is reported at start and in /readyz, not inside
a request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

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

    @classmethod
    def load(cls, encoding_name: str) -> Tokenizer:
        try:
            import tiktoken

            enc = tiktoken.get_encoding(encoding_name)
            enc.encode("warm up")
            return cls(encoding_name, enc)
        except Exception as exc:  # network error, unknown name, bad cache file
            msg = (
                f"tiktoken encoding {encoding_name!r} could not be loaded ({exc}); "
                "offline, set TIKTOKEN_CACHE_DIR to a folder holding its BPE file"
            )
            log.error(msg)
            return cls(encoding_name, None, msg)

    @property
    def ready(self) -> bool:
        return self._encoding is not None

    def count(self, text: str) -> int:
        if self._encoding is None:
            from app.errors import ServiceUnavailable

            raise ServiceUnavailable(self.error or "tokenizer not loaded", dependency="tokenizer")
        # disallowed_special=() : memories may legitimately contain "<|endoftext|>" text.
        return len(self._encoding.encode(text, disallowed_special=()))  # type: ignore[attr-defined]

    async def count_async(self, text: str) -> int:
        """count(), off the event loop when the text is large (THREAD_THRESHOLD_CHARS)."""
        if self._encoding is None or len(text) <= THREAD_THRESHOLD_CHARS:
            return self.count(text)
        return await asyncio.to_thread(self.count, text)

    async def count_many_async(self, texts: list[str]) -> list[int]:
        """count_many(), off the event loop when the texts are large together."""
        if self._encoding is None or sum(map(len, texts)) <= THREAD_THRESHOLD_CHARS:
            return self.count_many(texts)
        return await asyncio.to_thread(self.count_many, texts)

    def count_many(self, texts: list[str]) -> list[int]:
        # One by one, not tiktoken's encode_batch: that starts a pool of 8 threads on every
        # call, which cost 42.7 ms of CPU for 500 memories of ~85 characters against 4.3 ms
        # for this loop (bench/README.md, "Figures behind the code").
        return [self.count(t) for t in texts]
