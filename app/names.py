"""The naming rule of robots and namespaces, applied where a name is registered.

HTTP checks names as it parses a request (`common.RobotName`, the X-Namespace header), but a
name reaches the database through other ways in too (MCP, the CLI's commands, workers): the
services that register robots (`RobotService`) and namespaces (`NamespaceRepository.resolve`)
apply this rule themselves, so no way in can store a name the API refuses.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from functools import cache

RULE = "1 to 64 of A-Z a-z 0-9 . _ -"


@cache
def _name() -> re.Pattern[str]:
    # Imported on first use: `htm --help` builds its parser with `argument` below and must
    # not import pydantic, numpy and SQLAlchemy through app.common (tests/test_cli_start.py).
    from app.common import NAME_PATTERN

    return re.compile(NAME_PATTERN)


def is_valid(name: object) -> bool:
    return isinstance(name, str) and _name().fullmatch(name) is not None


def check(kind: str, name: str, field: str | None = None) -> str:
    """The name, or a 422 naming the rule (`field`: where the name came from)."""
    from app.errors import Unprocessable

    if not is_valid(name):
        message = f"{kind} name {name!r} is not valid: {RULE}"
        raise Unprocessable(message, errors=[{"field": field or kind, "message": message}])
    return name


def argument(kind: str) -> Callable[[str], str]:
    """An argparse `type` applying the rule to a command-line name (`--robot`, `--namespace`):
    a bad one is refused before anything starts."""

    def parse(value: str) -> str:
        if not is_valid(value):
            raise argparse.ArgumentTypeError(f"{kind} name {value!r} is not valid: {RULE}")
        return value

    parse.__name__ = f"{kind} name"  # argparse names the type in its message
    return parse
