"""`htm import` checks every name a line refers to before it writes anything (issue 43,
item 6): a file naming a pool, a group, a robot or a memory that is neither in the file nor in
the namespace is refused with exit 2 and a one-line message naming the line and the name, and
not a row is written. The probe that found it: an export of pool memories in the old format,
imported into a fresh namespace, wrote 48 of 61 memories before failing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.transfer.conftest import Htm
from tests.transfer.test_namespace_round_trip import ok, row_counts

AT = "2025-01-01T00:00:00Z"
HEADER = {"format": "htm-export", "version": 3, "namespace": "x", "model": None,
          "dimension": 384, "exported_at": AT}  # fmt: skip


def memory(key: str, author: str = "ann", **fields: Any) -> dict[str, Any]:
    return {"key": key, "content": f"about {key}", "author": author, "created_at": AT, **fields}


def good_file() -> list[dict[str, Any]]:
    """A file that imports: one line of every kind naming the others (line numbers: the
    index + 2, the header being line 1)."""
    return [
        {"kind": "robot", "name": "ann"},  # 2
        {"kind": "robot", "name": "bob", "working_memory_budget": 900},  # 3
        {"kind": "group", "name": "crew", "members": ["ann"]},  # 4
        {"kind": "pool", "name": "ops", "type": "team", "writers": ["ann"]},  # 5
        memory("m1"),  # 6
        memory("m2", pool="ops", visibility="pool"),  # 7
        memory("m3", visibility="group", group="crew"),  # 8
        memory("m4", "bob", valid_to="2025-06-01T00:00:00Z", superseded_by="m5"),  # 9
        memory("m5", "bob", valid_from="2025-06-01T00:00:00Z"),  # 10
        {"kind": "link", "source": "m1", "target": "m2", "type": "supports"},  # 11
        {"kind": "snapshot", "robot": "ann", "name": "s", "created_at": AT, "readable": ["m1"],
         "items": [{"key": "m1", "version": 1, "tokens": 3, "importance": 1.0, "added_at": AT,
                    "last_access_at": AT, "from_recall": False}]},  # 12
    ]  # fmt: skip


def write(path: Path, lines: list[dict[str, Any]], header: dict[str, Any] = HEADER) -> Path:
    path.write_text("\n".join(json.dumps(x) for x in [header, *lines]) + "\n")
    return path


def refused(htm: Htm, path: Path, ns: str) -> str:
    """The one line an import refused with (exit 2)."""
    run = htm("import", str(path), "--namespace", ns)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    return run.stderr.strip()


async def test_the_file_the_refusals_break_imports(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    run = htm("import", str(write(tmp_path / "f.jsonl", good_file())), "--namespace", ns)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {ns}: 5 added, 0 updated, 0 forgotten, 0 unchanged, "
        "2 robots set, 1 groups set, 1 pools set, 1 links added, 1 snapshots added"
    )
    client.headers["X-Namespace"] = ns
    m4 = await ok(client.get("/v1/robots/bob/memories/m4", params={"include": "superseded"}))
    assert (m4["superseded_by"], m4["valid_to"]) == ("m5", "2025-06-01T00:00:00Z")


def _drop(kind: str, name: str) -> Any:
    return lambda lines: [x for x in lines if (x.get("kind"), x.get("name")) != (kind, name)]


def _set(index: int, **fields: Any) -> Any:
    return lambda lines: [{**x, **fields} if i == index else x for i, x in enumerate(lines)]


def _item(key: str) -> Any:
    def change(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        snapshot = lines[-1]
        items = [{**snapshot["items"][0], "key": key}]
        return [*lines[:-1], {**snapshot, "items": items}]

    return change


# The change to the good file, the line it names and why.
BROKEN = {
    "pool": (_drop("pool", "ops"), 6, "memory 'm2' is in pool 'ops'"),
    "group": (_drop("group", "crew"), 7, "memory 'm3' is in group 'crew'"),
    "author": (_drop("robot", "bob"), 8, "memory 'm4' is by robot 'bob'"),
    "supersede": (_set(7, superseded_by="m9"), 9, "memory 'm4' is superseded by memory 'm9'"),
    "link source": (_set(9, source="m0"), 11, "link 'm0' -> 'm2' names memory 'm0'"),
    "link target": (_set(9, target="m0"), 11, "link 'm1' -> 'm0' names memory 'm0'"),
    "snapshot item": (_item("m0"), 12, "snapshot 's' names memory 'm0'"),
    "snapshot readable": (_set(10, readable=["m1", "m0"]), 12, "snapshot 's' names memory 'm0'"),
    "snapshot robot": (_set(10, robot="zed"), 12, "snapshot 's' is of robot 'zed'"),
}


@pytest.mark.parametrize("broken", BROKEN)
async def test_a_name_found_nowhere_is_refused_with_its_line_and_nothing_is_written(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path, broken: str
) -> None:
    change, line, why = BROKEN[broken]
    ns = f"t-{uuid.uuid4().hex[:12]}"
    path = write(tmp_path / "f.jsonl", change(good_file()))
    assert refused(htm, path, ns) == (
        f"htm import: {path}:{line}: {why}, which is neither in the file nor in namespace "
        f"{ns!r} (nothing imported)"
    )
    assert set((await row_counts(client, ns)).values()) == {0}


async def test_a_name_the_namespace_has_is_found_there(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """A file of the old format (no settings) imports into a namespace that has its pools and
    groups; the same file into a fresh one is refused and writes nothing."""
    ns, fresh = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    lines = [x for x in good_file() if x.get("kind") not in ("robot", "group", "pool")]
    path = write(tmp_path / "old.jsonl", lines, {**HEADER, "version": 2})
    assert refused(htm, path, fresh) == (
        f"htm import: {path}:3: memory 'm2' is in pool 'ops', which is neither in the file "
        f"nor in namespace {fresh!r} (nothing imported)"
    )
    assert set((await row_counts(client, fresh)).values()) == {0}

    client.headers["X-Namespace"] = ns
    await ok(client.put("/v1/pools/ops", json={"type": "team", "writers": ["ann"]}))
    await ok(client.put("/v1/groups/crew", json={"members": ["ann"]}))
    run = htm("import", str(path), "--namespace", ns)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {ns}: 5 added, 0 updated, 0 forgotten, 0 unchanged, "
        "1 links added, 1 snapshots added"
    )


async def test_a_robot_the_namespace_keeps_in_another_group_is_refused(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    ns = f"t-{uuid.uuid4().hex[:12]}"
    client.headers["X-Namespace"] = ns
    await ok(client.put("/v1/groups/other", json={"members": ["ann"]}))
    before = await row_counts(client, ns)
    path = write(tmp_path / "f.jsonl", good_file())
    assert refused(htm, path, ns) == (
        f"htm import: {path}:4: robot 'ann' is in group 'other' of namespace {ns!r}, which the "
        "file does not set: it cannot join group 'crew' (nothing imported)"
    )
    assert await row_counts(client, ns) == before


async def test_pool_memories_exported_before_go_into_a_fresh_namespace(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """The probe: a namespace whose memories are in pools (authors since revoked, a pool
    archived), exported and imported into a fresh namespace. Its memories and pools arrive;
    the same export without its settings (as an older htm wrote it) is refused up front."""
    a, b, c = (f"t-{uuid.uuid4().hex[:12]}" for _ in range(3))
    client.headers["X-Namespace"] = a
    await ok(client.put("/v1/pools/kb", json={"type": "shared", "writers": ["w1", "w2"]}))
    await ok(client.put("/v1/pools/old", json={"type": "team", "writers": ["w1", "w2"]}))
    for i in range(61):
        body = {"key": f"k{i:02d}", "content": f"note {i}", "pool": "kb" if i % 5 else "old"}
        await ok(client.post(f"/v1/robots/w{1 + i % 2}/memories", json=body))
    await ok(client.delete("/v1/pools/kb/grants/w2"))
    await ok(client.delete("/v1/pools/old"))
    out = tmp_path / "a.jsonl"
    assert htm("export", "--namespace", a, "--out", str(out)).returncode == 0
    run = htm("import", str(out), "--namespace", b)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {b}: 61 added, 0 updated, 0 forgotten, 0 unchanged, "
        "2 robots set, 2 pools set"
    )
    client.headers["X-Namespace"] = b
    pools = await ok(client.get("/v1/pools"))
    assert [(p["name"], p["writers"], p["archived_at"] is not None) for p in pools] == [
        ("kb", ["w1"], False),
        ("old", ["w1", "w2"], True),
    ]
    kb = await ok(client.get("/v1/pools/kb"))
    assert kb["stats"]["by_author"] == {"w1": 24, "w2": 24}

    header, *lines = [json.loads(x) for x in out.read_text().splitlines()]
    older = write(tmp_path / "old.jsonl", [x for x in lines if "kind" not in x],
                  {**header, "version": 1})  # fmt: skip
    assert refused(htm, older, c) == (
        f"htm import: {older}:2: memory 'k00' is in pool 'old', which is neither in the file "
        f"nor in namespace {c!r} (nothing imported)"
    )
    assert set((await row_counts(client, c)).values()) == {0}
