"""Snapshots in `htm export` / `htm import` (issue 35, item 3): a snapshot line per snapshot,
recreated in the importing namespace with the memories of its keys, once."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from tests.snapshots.test_snapshots_api import recall, snapshot, wm
from tests.transfer.conftest import Htm
from tests.working_memory.test_api_working_memory import add


async def test_snapshots_round_trip_and_restore_the_same_working_memory(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    client.headers["X-Namespace"] = a
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "ann", "b", 7, 1, "beta")
    await add(client, "bob", "z", 6, 9, "zebra")
    assert await recall(client, "ann", "zebra") == ["z"]
    s = await snapshot(client, "ann", name="kept")
    taken = await wm(client, "ann")
    await add(client, "ann", "c", 4, 3, "gamma")  # after the snapshot: not in it
    out = tmp_path / "a.jsonl"

    run = htm("export", "--namespace", a, "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().endswith(f"exported 4 memories of namespace {a} to {out}")
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["version"] == 3
    assert [x.get("kind") for x in lines[1:]] == [
        "robot", "robot", None, None, None, None, "snapshot",
    ]  # fmt: skip
    line = lines[-1]
    assert (line["robot"], line["name"], line["readable"]) == ("ann", "kept", ["a", "b", "z"])
    assert [(i["key"], i["tokens"], i["from_recall"]) for i in line["items"]] == [
        ("b", 7, False), ("a", 5, False), ("z", 6, True),
    ]  # fmt: skip

    assert htm("import", str(out), "--namespace", b).stdout.strip() == (
        f"imported into namespace {b}: 4 added, 0 updated, 0 forgotten, 0 unchanged, "
        "2 robots set, 1 snapshots added"
    )
    assert htm("import", str(out), "--namespace", b).stdout.strip() == (
        f"imported into namespace {b}: 0 added, 0 updated, 0 forgotten, 4 unchanged"
    )
    client.headers["X-Namespace"] = b
    listed = (await client.get("/v1/robots/ann/snapshots")).json()
    assert [(x["name"], x["created_at"], x["item_count"], x["tokens"]) for x in listed] == [
        ("kept", s["created_at"], 3, 18)
    ]
    detail = (await client.get(f"/v1/robots/ann/snapshots/{listed[0]['id']}")).json()
    assert detail["readable"] == 3
    r = await client.post(f"/v1/robots/ann/snapshots/{listed[0]['id']}/restore")
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == ["b", "a", "z"]
    assert await wm(client, "ann") == taken  # the same items, order, times and origin


async def test_one_robot_s_export_holds_its_snapshots_with_its_own_memories(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """`--robot`: the file has only that robot's memories, so its snapshots name only those
    (and the file imports into a fresh namespace: every key it names is in it)."""
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    client.headers["X-Namespace"] = a
    await add(client, "ann", "a", 5, 3, "alpha")
    await add(client, "bob", "z", 6, 9, "zebra")
    assert await recall(client, "ann", "zebra") == ["z"]
    await snapshot(client, "ann", name="kept")
    out = tmp_path / "ann.jsonl"
    assert htm("export", "--namespace", a, "--robot", "ann", "--out", str(out)).returncode == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x.get("kind"), x.get("name") or x.get("key")) for x in lines[1:]] == [
        ("robot", "ann"), (None, "a"), ("snapshot", "kept"),
    ]  # fmt: skip
    assert ([i["key"] for i in lines[-1]["items"]], lines[-1]["readable"]) == (["a"], ["a"])
    run = htm("import", str(out), "--namespace", b)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {b}: 1 added, 0 updated, 0 forgotten, 0 unchanged, "
        "1 robots set, 1 snapshots added"
    )
