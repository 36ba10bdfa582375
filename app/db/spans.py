"""A statement's client span by the OpenTelemetry database conventions: named by its query
summary ("SELECT memory", "INSERT memory_event"), with `db.system.name`, `db.query.summary`,
`db.operation.name`, `db.collection.name` (when it names one table), `db.namespace` and the
server's address and port. The summary is made from the statement's text as the conventions
describe it: its operations and the tables they read or write, in order, without literals,
parameters or the names of its own common table expressions. Each statement's text is
summarised once (they are the repositories' fixed clauses)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import URL

SYSTEM = "postgresql"
MAX_SUMMARY = 255  # the conventions' advice for db.query.summary
OPERATIONS = {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "CALL", "COPY", "TRUNCATE"}
# The next identifier is a table: FROM memory, JOIN robot, INSERT INTO memory_event,
# UPDATE memory (UPDATE is both), TRUNCATE memory.
BEFORE_TABLE = {"FROM", "JOIN", "INTO", "UPDATE", "TRUNCATE", "USING"}
# FROM / UPDATE words that do not lead to a table: IS DISTINCT FROM x, FOR UPDATE (a lock),
# FOR NO KEY UPDATE, ON CONFLICT ... DO UPDATE SET, extract(epoch FROM ...).
NOT_AN_OPERATION_AFTER = {"FOR", "KEY", "DO"}
NOT_A_TABLE_AFTER = {"DISTINCT"}
SKIPPED = {"ONLY", "LATERAL"}
KEYWORDS = {
    "SELECT", "WHERE", "SET", "VALUES", "DEFAULT", "ON", "AS", "WITH", "RECURSIVE", "NOT",
    "ROWS", "GROUP", "ORDER", "LIMIT", "RETURNING",
}  # fmt: skip

_TOKEN = re.compile(
    r"""--[^\n]*|/\*.*?\*/                  # comments
      |'(?:[^']|'')*'                       # string literals
      |\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$  # dollar-quoted literals
      |\$\d+|:\w+                           # parameters
      |"(?:[^"]|"")*"                       # quoted identifiers
      |[A-Za-z_][\w$]*(?:\.[A-Za-z_][\w$]*)*  # words, schema-qualified names
      |\S""",
    re.S | re.X,
)


def _identifier(token: str) -> bool:
    return (token[0].isalpha() or token[0] in '_"') and token.upper() not in KEYWORDS


@lru_cache(maxsize=2048)
def summary(sql: str) -> tuple[str, tuple[str, ...]]:
    """(the statement's query summary, the tables it names in order, without repeats)."""
    tokens = [
        t for t in (m.group(0) for m in _TOKEN.finditer(sql)) if t[0] not in "'-/$:" or t == "/"
    ]
    # Its common table expressions' names (name AS [NOT] [MATERIALIZED] ( ...) are no tables.
    ctes = set()
    for i, t in enumerate(tokens[:-2]):
        if tokens[i + 1].upper() == "AS" and _identifier(t):
            rest = [x.upper() for x in tokens[i + 2 : i + 5]]
            while rest and rest[0] in {"NOT", "MATERIALIZED"}:
                rest.pop(0)
            if rest and rest[0] == "(":
                ctes.add(t)
    groups: list[tuple[str, list[str]]] = []  # each operation, with the tables it names
    tables: list[str] = []
    previous = ""
    for i, t in enumerate(tokens):
        word = t.upper()
        if word in OPERATIONS and previous not in NOT_AN_OPERATION_AFTER:
            groups.append((word, []))
        if word in BEFORE_TABLE and previous not in NOT_AN_OPERATION_AFTER | NOT_A_TABLE_AFTER:
            j = i + 1
            while j < len(tokens) and tokens[j].upper() in SKIPPED:
                j += 1
            name = tokens[j] if j < len(tokens) else ""
            after = tokens[j + 1] if j + 1 < len(tokens) else ""
            reads = word in {"FROM", "JOIN", "USING"} and previous != "DELETE"
            # FROM unnest(...) reads a function, FROM placed a CTE (a write's target is a
            # table even when a CTE has its name); INSERT INTO t (a, b) names t's columns.
            if (
                name
                and groups
                and _identifier(name)
                and not (reads and (after == "(" or name in ctes))
            ):
                if name not in groups[-1][1]:
                    groups[-1][1].append(name)
                if name not in tables:
                    tables.append(name)
        previous = word
    # An operation naming no table (SELECT 1, SELECT ... FROM unnest(...)) only when nothing
    # else is said, and each operation on the same tables once.
    said: list[tuple[str, list[str]]] = []
    for group in groups:
        if (group[1] or not (tables or said)) and group not in said:
            said.append(group)
    parts = [part for op, names in said for part in (op, *names)]
    text = " ".join(parts)
    if len(text) > MAX_SUMMARY:
        text = text[: text.rfind(" ", 0, MAX_SUMMARY + 1)]
    return text, tuple(tables)


@lru_cache(maxsize=8)
def _server(url: URL) -> Mapping[str, Any]:
    server: dict[str, Any] = {"db.system.name": SYSTEM}
    if url.database:
        server["db.namespace"] = url.database
    # A Unix socket (?host=/run/dir) is named by its path, as asyncpg connects to it; TCP
    # by host and port.
    socket_dir = url.query.get("host")
    port = url.port or 5432
    if isinstance(socket_dir, str) and socket_dir.startswith("/"):
        server["server.address"] = f"{socket_dir}/.s.PGSQL.{port}"
    elif url.host:
        server["server.address"] = url.host
        server["server.port"] = port
    return server


def statement_span(sql: str, url: URL) -> tuple[str, dict[str, Any]]:
    """The span's name and attributes for one statement on the database at `url`."""
    text, tables = summary(sql)
    attributes = dict(_server(url))
    if text:
        attributes["db.query.summary"] = text
        attributes["db.operation.name"] = text.split(" ", 1)[0]
    if len(tables) == 1:
        attributes["db.collection.name"] = tables[0]
    return text or SYSTEM, attributes
