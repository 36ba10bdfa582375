"""`htm load`: files chunked by headings into memories, and loading again as a sync (changed
chunks updated, new ones added, removed ones forgotten), on a temporary folder."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from app.transfer.chunks import chunks, file_key
from tests.transfer.conftest import Htm

GUIDE = """Read this first.

# Setup
Install it.

## Config
Set X.

```sh
# a comment in code, not a heading
```

# Setup
Again, for the second machine.
"""

TODO = "Buy milk.\n\nCall the plumber\nabout the sink.\n"


def test_markdown_is_cut_at_headings_outside_code_and_repeats_are_numbered() -> None:
    got = chunks(Path("/notes/guide.md"), GUIDE)
    assert [(c.key, c.heading) for c in got] == [
        ("file:notes:guide.md@top", None),
        ("file:notes:guide.md@setup", "Setup"),
        ("file:notes:guide.md@config", "Config"),
        ("file:notes:guide.md@setup.2", "Setup"),
    ]
    assert got[2].text == "## Config\nSet X.\n\n```sh\n# a comment in code, not a heading\n```"
    assert [c.key for c in chunks(Path("/n/My Notes/a b.txt"), TODO)] == [
        "file:n:My-Notes:a-b.txt@1"  # both paragraphs fit one group
    ]


def test_a_path_too_long_for_a_key_keeps_its_name_and_a_hash() -> None:
    long = Path("/" + "/".join(["a-very-long-folder-name"] * 6) + "/notes.md")
    key = file_key(long)
    assert key.startswith("file:") and key.endswith(":notes.md") and len(key) == 5 + 12 + 9
    assert file_key(long) == key != file_key(long.with_name("other.md"))


async def live_keys(client: httpx.AsyncClient, ns: str) -> dict[str, bool]:
    """Every key of the namespace: True when live, False when forgotten."""
    client.headers["X-Namespace"] = ns
    r = await client.get("/v1/robots/x/memories", params={"include_deleted": True, "limit": 200})
    return {m["key"]: m["deleted_at"] is None for m in r.json()["items"]}


def keys_of(path: Path, text: str) -> set[str]:
    return {c.key for c in chunks(path.resolve(), text)}


def summary(run: Any) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


async def test_loading_again_updates_changed_chunks_adds_new_ones_and_forgets_removed_ones(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / ".hidden").mkdir()
    guide, todo, deep = notes / "guide.md", notes / "todo.txt", notes / "sub" / "deep.md"
    guide.write_text(GUIDE)
    todo.write_text(TODO)
    deep.write_text("# Deep\nDown here.\n")
    (notes / ".hidden" / "secret.md").write_text("# Secret\nnot loaded\n")
    (notes / "image.png").write_bytes(b"\x89PNG")
    client.headers["X-Namespace"] = ns
    other = await client.post("/v1/robots/me/memories", json={"key": "mine", "content": "x"})
    assert other.status_code == 201

    assert summary(htm("load", str(notes), "--namespace", ns, "--robot", "librarian")) == (
        f"loaded {notes} into namespace {ns}: 6 added, 0 updated, 0 forgotten, 0 unchanged"
    )
    first = keys_of(guide, GUIDE) | keys_of(todo, TODO) | keys_of(deep, "# Deep\n")
    assert len(first) == 6
    assert await live_keys(client, ns) == {"mine": True, **dict.fromkeys(first, True)}
    setup = (await client.get(f"/v1/robots/x/memories/{file_key(guide.resolve())}@setup")).json()
    assert setup["content"] == "# Setup\nInstall it."
    assert (setup["author"], setup["type"]) == ("librarian", "document")
    assert setup["metadata"] == {
        "source": "htm load", "path": str(guide.resolve()), "heading": "Setup",
        "chunk": chunks(guide, GUIDE)[1].digest,
    }  # fmt: skip

    # Unchanged files: nothing written.
    assert summary(htm("load", str(notes), "--namespace", ns, "--robot", "librarian")).endswith(
        ": 0 added, 0 updated, 0 forgotten, 6 unchanged"
    )

    # Config changes, the second Setup goes, a heading comes; todo.txt goes, new.md comes.
    guide2 = GUIDE.replace("Set X.", "Set Y.").split("\n# Setup\nAgain")[0] + "\n# FAQ\nAsk.\n"
    guide.write_text(guide2)
    todo.unlink()
    new = notes / "new.md"
    new.write_text("No heading at all.\n")
    assert summary(htm("load", str(notes), "--namespace", ns, "--robot", "librarian")).endswith(
        ": 2 added, 1 updated, 2 forgotten, 3 unchanged"
    )
    second = keys_of(guide, guide2) | keys_of(new, "x") | keys_of(deep, "# Deep\n")
    g = file_key(guide.resolve())
    assert second - first == {f"{g}@faq", f"{file_key(new.resolve())}@top"}
    assert first - second == {f"{g}@setup.2", f"{file_key(todo.resolve())}@1"}
    assert await live_keys(client, ns) == {
        "mine": True, **dict.fromkeys(first - second, False), **dict.fromkeys(second, True),
    }  # fmt: skip
    config = (await client.get(f"/v1/robots/x/memories/{g}@config")).json()
    assert (config["version"], config["content"].splitlines()[1]) == (2, "Set Y.")

    # Loading a sub-folder syncs only what is under it.
    deep.write_text("# Deeper\nStill down here.\n")
    assert summary(htm("load", str(notes / "sub"), "--namespace", ns)).endswith(
        ": 1 added, 0 updated, 1 forgotten, 0 unchanged"
    )
    now = await live_keys(client, ns)
    assert {k for k, live in now.items() if live} == (
        {"mine"} | (second - keys_of(deep, "# Deep\n")) | keys_of(deep, "# Deeper\n")
    )


async def test_loading_a_missing_path_fails_and_writes_nothing(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    run = htm("load", str(tmp_path / "nope"), "--namespace", ns)
    assert run.returncode == 1
    assert f"htm load: {tmp_path / 'nope'} is neither a file nor a folder" in run.stderr
    assert await live_keys(client, ns) == {}
