"""Short aliases of made-up keys (issue 49). A key the service made up (`m-` and 32 hex
digits: 20-26 tokens, more than a short fact) is written `#<its memory id>` in every tool's
and prompt's text (`#4821`: 2-4 tokens); the structured copy keeps the key. Every input
that names a memory (`key`, `target`, `supersedes`, `keys`) takes either: an alias is the
key of that memory, if the robot may read it (else 404, as an unknown key). Stable, and
stateless: any process answers any alias, in any later call."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from app.errors import NotFound
from app.unit import UnitOfWork

MADE_UP = re.compile(r"\bm-[0-9a-f]{32}\b")
ALIAS = re.compile(r"#([0-9]{1,19})")


async def shorten(u: UnitOfWork, text: str) -> str:
    """`text` with each made-up key that names a memory written as its alias."""
    keys = sorted(set(MADE_UP.findall(text)))
    if not keys:
        return text
    ids = await u.reader.ids_of(keys)
    return MADE_UP.sub(lambda m: f"#{ids[m[0]]}" if m[0] in ids else m[0], text)


async def resolve(u: UnitOfWork, robot: str, given: BaseModel) -> BaseModel:
    """`given` with each alias in its memory-naming fields replaced by the key."""
    named: dict[str, Any] = {
        f: getattr(given, f) for f in getattr(given, "aliased", ()) if getattr(given, f)
    }
    asked = {
        int(found[1])
        for value in named.values()
        for v in (value if isinstance(value, list) else [value])
        if (found := ALIAS.fullmatch(v))
    }
    if not asked:
        return given
    keys = await u.reader.keys_of(robot, sorted(asked))

    def key(v: str) -> str:
        found = ALIAS.fullmatch(v)
        if found is None:
            return v
        if int(found[1]) not in keys:
            raise NotFound(f"memory {v!r} does not exist")
        return keys[int(found[1])]

    update = {
        f: [key(v) for v in value] if isinstance(value, list) else key(value)
        for f, value in named.items()
    }
    return given.model_copy(update=update)
