"""Textual SQL, parsed once per distinct statement.

`sqlalchemy.text()` scans its string for bind parameters every time it is called; called per
request, that was ~6% of an add's CPU in py-spy. Statements built from filters repeat too
(a handful of shapes), so a bounded cache covers them as well.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import TextClause, text


@lru_cache(maxsize=1024)
def sql(statement: str) -> TextClause:
    return text(statement)
