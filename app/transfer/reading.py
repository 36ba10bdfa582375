"""Reading an export file (app/transfer/format.py) a line at a time: each line parsed as a
request body is (integers kept exactly) and given its model by its `kind`; a line that is not
one is a `BadFile` naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.common import parse_json
from app.transfer.format import FORMAT_VERSION, KINDS, Header, Line, Record


class BadFile(Exception):
    """A line of the file that cannot be imported, and why."""

    def __init__(self, path: Path, line: int, why: str) -> None:
        super().__init__(f"{path}:{line}: {why}")


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            if raw.strip():
                try:
                    yield n, parse_json(raw)  # as a request body: integers kept exactly
                except json.JSONDecodeError as exc:
                    raise BadFile(path, n, f"not JSON: {exc}") from None


def read_header(path: Path) -> Header:
    for n, value in _records(path):
        try:
            header = Header.model_validate(value)
        except ValidationError as exc:
            raise BadFile(path, n, f"not an htm export header: {why(exc)}") from None
        if header.version > FORMAT_VERSION:
            raise BadFile(path, n, f"format version {header.version} is newer than this htm")
        return header
    raise BadFile(path, 1, "empty file")


def why(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}" for e in exc.errors()[:3]
    )


def lines(path: Path) -> Iterator[tuple[int, Line]]:
    """Every line after the header, by its kind (a memory's has none)."""
    records = _records(path)
    next(records)  # the header
    for n, value in records:
        kind = value.get("kind") if isinstance(value, dict) else None
        model = Record if kind is None else KINDS.get(kind)
        if model is None:
            raise BadFile(path, n, f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        try:
            yield n, model.model_validate(value)  # type: ignore[misc]
        except ValidationError as exc:
            raise BadFile(path, n, why(exc)) from None


def memories(path: Path) -> Iterator[tuple[int, Record]]:
    for n, r in lines(path):
        if isinstance(r, Record):
            yield n, r
