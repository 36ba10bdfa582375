"""A statement's rows as the repositories read them: `row.column`, `.one()`, `.scalar()`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg


class Row(asyncpg.Record):
    """A row that also answers `row.column`."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def _asdict(self) -> dict[str, Any]:
        return dict(self.items())


class Result:
    """The rows of one statement, with the accessors the repositories use."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Row]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def mappings(self) -> Result:  # rows are mappings already
        return self

    def all(self) -> list[Row]:
        return self._rows

    def one(self) -> Row:
        if len(self._rows) != 1:
            raise LookupError(f"expected exactly one row, got {len(self._rows)}")
        return self._rows[0]

    def one_or_none(self) -> Row | None:
        if len(self._rows) > 1:
            raise LookupError(f"expected at most one row, got {len(self._rows)}")
        return self._rows[0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> Scalars:
        return Scalars(r[0] for r in self._rows)


class Scalars(list[Any]):
    """The first column of each row; `.all()` as in SQLAlchemy."""

    def all(self) -> list[Any]:
        return list(self)
