"""`htm load PATH`: the chunks of the files at PATH become memories; loading again updates
the chunks that changed (PUT), adds the new ones and forgets (soft delete) those no longer in
the files. Memories made here carry metadata {source: "htm load", path, heading, chunk}: the
sync knows its own by that, so nothing else in the namespace is touched."""

from __future__ import annotations

from pathlib import Path

from rich.progress import Progress

from app.components import Components
from app.transfer.chunks import MARKDOWN, TEXT, chunks
from app.transfer.repository import TransferRepository
from app.transfer.sync import Counts, Wanted, apply, forget
from app.unit import operator, unit_of_work

SOURCE = "htm load"
BATCH = 100


def files(path: Path) -> tuple[Path, list[Path]]:
    """The absolute path, and its file or the folder's markdown and text files (hidden ones
    left out), sorted."""
    root = path.resolve()
    if root.is_file():
        return root, [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is neither a file nor a folder")
    return root, sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix.lower() in MARKDOWN | TEXT
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def wanted(path: Path, robot: str) -> list[Wanted]:
    text = path.read_text(encoding="utf-8", errors="replace").replace("\x00", "")
    return [
        Wanted(
            key=c.key,
            author=robot,
            content=c.text,
            type="document",
            importance=1.0,
            tags=[],
            metadata={"source": SOURCE, "path": str(path), "heading": c.heading, "chunk": c.digest},
            source=SOURCE,  # also the column (migration 0027 copied it there for older chunks)
        )
        for c in chunks(path, text)
    ]


async def load(
    c: Components, path: Path, namespace: str, *, robot: str, progress: Progress | None = None
) -> Counts:
    root, found = files(path)
    caller = await operator(c, namespace)
    task = progress.add_task(f"load {path}", total=len(found)) if progress else None
    counts, keys, batch = Counts(), set(), []
    for f in found:
        for w in wanted(f, robot):
            keys.add(w.key)
            batch.append(w)
        if len(batch) >= BATCH:
            counts += await apply(c, caller, batch)
            batch = []
        if progress is not None and task is not None:
            progress.advance(task)
    if batch:
        counts += await apply(c, caller, batch)
    async with unit_of_work(c, caller) as r:
        loaded = await TransferRepository(r.session).loaded(caller.namespace_id, str(root))
    for key in sorted(set(loaded) - keys):
        await forget(c, caller, robot, key)
        counts.forgotten += 1
    return counts
