"""Files into chunks, and each chunk's key. A markdown chunk is a heading and its body (the
text before the first heading is one too); a text file is cut at blank lines into groups of
paragraphs of at most TEXT_CHUNK_CHARS (a paragraph longer than that is a chunk alone)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

MARKDOWN = {".md", ".markdown"}
TEXT = {".txt"}
TEXT_CHUNK_CHARS = 2000
MAX_KEY = 128  # app.common.KEY_PATTERN

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Chunk:
    key: str
    heading: str | None
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def markdown_sections(text: str) -> list[tuple[str | None, str]]:
    """(heading, the heading line and its body) in order; `#` lines in code fences are code."""
    sections: list[tuple[str | None, str]] = []
    heading: str | None = None
    lines: list[str] = []
    fenced = False

    def close() -> None:
        body = "\n".join(lines).strip()
        if body:
            sections.append((heading, body))

    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        found = None if fenced else _HEADING.match(line)
        if found:
            close()
            heading, lines = found.group(2).strip(), [line]
        else:
            lines.append(line)
    close()
    return sections


def text_sections(text: str) -> list[tuple[str | None, str]]:
    paragraphs = [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    groups: list[str] = []
    for p in paragraphs:
        if groups and len(groups[-1]) + 2 + len(p) <= TEXT_CHUNK_CHARS:
            groups[-1] += "\n\n" + p
        else:
            groups.append(p)
    return [(None, g) for g in groups]


def slug(heading: str) -> str:
    return _SLUG.sub("-", heading.lower()).strip("-")[:48].strip("-") or "section"


def file_key(path: Path) -> str:
    """`file:` and the absolute path, its parts joined by `:` (a key has no `/`); a path
    too long for a key keeps its file name and a hash of the whole."""
    parts = [_UNSAFE.sub("-", p) for p in path.parts if p != path.anchor]
    key = "file:" + ":".join(parts)
    if len(key) <= MAX_KEY - 60:
        return key
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    return f"file:{digest}:{parts[-1][:40]}"


def chunks(path: Path, text: str) -> list[Chunk]:
    """The file's chunks with their keys: the file's key, `@`, the heading's slug (`top`
    before the first heading; the group's number in a text file), `.n` for the n-th repeat."""
    markdown = path.suffix.lower() in MARKDOWN
    sections = markdown_sections(text) if markdown else text_sections(text)
    base = file_key(path)
    seen: dict[str, int] = {}
    out = []
    for i, (heading, body) in enumerate(sections, start=1):
        name = (slug(heading) if heading is not None else "top") if markdown else str(i)
        seen[name] = seen.get(name, 0) + 1
        suffix = f".{seen[name]}" if seen[name] > 1 else ""
        out.append(Chunk(f"{base}@{name}{suffix}", heading, body))
    return out
