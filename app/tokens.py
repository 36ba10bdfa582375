"""Token counting with tiktoken, loaded once at start.

tiktoken downloads its BPE file on first use; offline it reads TIKTOKEN_CACHE_DIR. Loading
happens in the lifespan so a missing file is reported at start and in /readyz, not inside
a request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


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

    def count_many(self, texts: list[str]) -> list[int]:
        # encode_batch fans out to a thread pool: worth it for big batches only.
        if self._encoding is None or len(texts) < 32:
            return [self.count(t) for t in texts]
        enc = self._encoding.encode_batch(texts, disallowed_special=())  # type: ignore[attr-defined]
        return [len(e) for e in enc]
