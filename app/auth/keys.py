"""API key format and hashing.

A key is `htm_` + 43 url-safe characters (256 random bits). Only its SHA-256 is stored: for
a high-entropy secret a fast hash is the right tool (nothing to brute-force), and a unique
index on the hash makes lookup O(1). The final comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

PREFIX = "htm_"
# What generate() makes: token_urlsafe(32) is 43 characters of the url-safe alphabet.
SHAPE = re.compile(r"htm_[A-Za-z0-9_-]{43}")


def generate() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def well_formed(key: str) -> bool:
    """Could this be a key at all? Anything else is rejected without a database lookup."""
    return SHAPE.fullmatch(key) is not None


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def display_prefix(key: str) -> str:
    """What lists show, so people can tell keys apart without seeing them."""
    return key[: len(PREFIX) + 6]


def matches(key: str, stored: bytes) -> bool:
    return hmac.compare_digest(digest(key), stored)
