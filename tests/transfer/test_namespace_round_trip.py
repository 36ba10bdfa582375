"""Export and import round-trip a whole namespace (issue 43, item 6): robots and their
budgets, groups, pools with their grants, expiry and archive, retention policies, the
maintenance schedule, private, group and pool memories, supersede chains, archived and
forgotten memories, explicit links and snapshots. The namespace is built through the HTTP
API, exported, imported into a fresh namespace and exported again: the two files are the same
but for what counts the namespace's own history (times of writes, versions). A second import
writes nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from tests.transfer.conftest import Htm

# Each namespace's rows, table by table (those without a namespace column through the
# memory or the snapshot they belong to).
COUNTS = {
    table: f"SELECT count(*) FROM {table} t WHERE t.namespace_id = :ns"
    for table in (
        "memory", "memory_key", "robot", "pool", "memory_link", "memory_tag", "memory_event",
        "working_memory_snapshot", "retention_policy", "maintenance_schedule", "session",
    )
} | {
    "memory_version": "SELECT count(*) FROM memory_version v JOIN memory_key k "
    "ON k.memory_id = v.memory_id WHERE k.namespace_id = :ns",
    "working_memory_snapshot_item": "SELECT count(*) FROM working_memory_snapshot_item i "
    "JOIN working_memory_snapshot s ON s.id = i.snapshot_id WHERE s.namespace_id = :ns",
}  # fmt: skip


async def row_counts(client: httpx.AsyncClient, ns: str) -> dict[str, int]:
    """Every table's rows of the namespace (all 0 when it does not exist)."""
    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        found = (
            await s.execute(text("SELECT id FROM namespace WHERE name = :ns"), {"ns": ns})
        ).scalar()
        return {
            table: 0 if found is None else (await s.execute(text(q), {"ns": found})).scalar_one()
            for table, q in COUNTS.items()
        }


async def ok(response: Any) -> Any:
    r = await response
    assert r.status_code in (200, 201), r.text
    return r.json()


async def build(client: httpx.AsyncClient, ns: str) -> None:
    """A namespace with every kind of object, through the HTTP API."""
    client.headers["X-Namespace"] = ns
    put, post = client.put, client.post

    async def add(robot: str, key: str, content: str, **body: Any) -> None:
        await ok(
            post(f"/v1/robots/{robot}/memories", json={"key": key, "content": content, **body})
        )

    await ok(put("/v1/robots/alice", json={"working_memory_budget": 5000, "session_ttl_s": 1800,
                                          "summarize_evictions": True}))  # fmt: skip
    await ok(put("/v1/robots/carol", json={"working_memory_budget": 700}))
    await ok(put("/v1/robots/idle", json={}))  # a robot that holds nothing
    await ok(put("/v1/groups/team", json={"members": ["alice", "bob"],
                                         "working_memory_budget": 3000}))  # fmt: skip
    await ok(put("/v1/pools/handbook", json={"type": "shared", "readers": ["carol"],
                                            "writers": ["alice", "bob"]}))  # fmt: skip
    await ok(put("/v1/pools/ops", json={"type": "team", "writers": ["bob"], "public_read": True}))
    await ok(put("/v1/pools/sprint", json={"type": "task", "writers": ["alice"],
                                          "expires_at": "2031-01-01T00:00:00Z"}))  # fmt: skip
    await ok(put("/v1/pools/attic", json={"type": "shared", "writers": ["carol"]}))

    await add("alice", "policy-1", "Deploys need two approvals.", tags=["ops", "deploy"])
    await add("bob", "policy-2", "Approvals come from the on-call pair.", tags=["ops"],
              type="decision", importance=7, metadata={"source": "wiki", "n": 3})  # fmt: skip
    await add("alice", "secret", "The vault key rotates monthly.", visibility="private",
              readers=["carol"])  # fmt: skip
    await add("alice", "team-note", "Standup moved to 10:00.", visibility="group")
    await add("bob", "bob-team", "Bob covers Fridays.", visibility="group")
    await add("alice", "hb-1", "Handbook: the release checklist.", pool="handbook")
    await add("bob", "hb-2", "Handbook: rollback steps.", pool="handbook")
    await add("bob", "ops-1", "Ops: page the DBA for replication lag.", pool="ops")
    await add("alice", "sprint-1", "Sprint goal: ship imports.", pool="sprint")
    await add("carol", "attic-1", "An attic note.", pool="attic")
    await add("alice", "city@2023", "Alice lives in Lyon.", valid_from="2023-01-01T00:00:00Z",
              created_at="2023-01-01T00:00:00Z")  # fmt: skip
    await add("alice", "city@2024", "Alice lives in Paris.", valid_from="2024-01-01T00:00:00Z",
              supersedes=["city@2023"])  # fmt: skip
    await add("carol", "city@2025", "Alice lives in Rome.", valid_from="2025-01-01T00:00:00Z",
              supersedes=["city@2024"])  # fmt: skip
    await add("bob", "old-note", "A note nobody read.", type="note",
              created_at="2020-01-01T00:00:00Z")  # fmt: skip
    await add("bob", "dropped", "Forgotten, its link kept.")
    await add("bob", "old-read", "An old note read since.", type="note",
              created_at="2020-01-02T00:00:00Z")  # fmt: skip
    for _ in range(2):  # accesses: what retention's idle and stale rules judge
        await ok(client.get("/v1/robots/bob/memories/old-read"))
    await client.app.state.components.access.flush()  # type: ignore[attr-defined]

    await ok(post("/v1/robots/alice/memories/policy-1/links",
                  json={"target": "policy-2", "type": "supports", "weight": 0.5}))  # fmt: skip
    await ok(post("/v1/robots/alice/memories/hb-1/links",
                  json={"target": "dropped", "weight": 0.9}))  # fmt: skip
    await ok(post("/v1/robots/carol/memories/secret/links",
                  json={"target": "policy-1", "type": "contradicts"}))  # fmt: skip
    await ok(client.delete("/v1/robots/bob/memories/dropped"))
    await add("alice", "scratch", "Gone for good after the snapshot.")
    await ok(post("/v1/robots/alice/snapshots", json={"name": "before"}))
    # Its snapshot item is left out of the export: every key a line names is in the file.
    hard = {"hard": True, "confirm": "scratch"}
    await ok(client.delete("/v1/robots/alice/memories/scratch", params=hard))

    await ok(
        put("/v1/retention", json={"policies": [{"type": "note", "rule": "idle", "days": 30}]})
    )
    run = await ok(post("/v1/retention/run", json={}))
    assert run["archived"] == 1  # old-note, as the idle rule (old-read was read)
    await ok(put("/v1/retention", json={"policies": [
        {"type": "note", "rule": "idle", "days": 30}, {"rule": "stale", "days": 90},
    ]}))  # fmt: skip
    schedule = {"schedule": "30 3 * * *", "steps": ["dedupe", "retention"], "dedupe": "semantic"}
    await ok(put("/v1/maintenance", json=schedule))
    # Changed after their memories were written: bob no longer writes the handbook and is
    # in another group than his group memory's, the attic is archived.
    await ok(client.delete("/v1/pools/handbook/grants/bob"))
    await ok(put("/v1/pools/handbook/grants/dave", json={"level": "read"}))
    await ok(put("/v1/groups/team", json={"members": ["alice"], "working_memory_budget": 3000}))
    await ok(put("/v1/groups/night", json={"members": ["bob"]}))
    await ok(client.delete("/v1/pools/attic"))


def export(htm: Htm, ns: str, out: Path) -> list[dict[str, Any]]:
    run = htm("export", "--namespace", ns, "--out", str(out))
    assert run.returncode == 0, run.stderr
    return [json.loads(x) for x in out.read_text().splitlines()]


def normalised(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The file without what counts a namespace's own history: the header's name and time,
    when each memory was last written and deleted (whether it is deleted stays) and its
    version, when a pool was archived (whether it is stays)."""
    header, *rest = lines
    out: list[dict[str, Any]] = [
        {k: v for k, v in header.items() if k not in ("namespace", "exported_at")}
    ]
    for line in rest:
        line = dict(line)
        if "kind" not in line:
            for k in ("updated_at", "version"):
                line.pop(k)
            line["deleted_at"] = line["deleted_at"] is not None
        elif line["kind"] == "pool":
            line["archived_at"] = line["archived_at"] is not None
        out.append(line)
    return out


async def test_a_namespace_round_trips_through_export_and_import(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    await build(client, a)
    original = export(htm, a, tmp_path / "a.jsonl")
    kinds = [x.get("kind", "memory") for x in original[1:]]
    assert kinds == (
        ["robot"] * 5 + ["group"] * 2 + ["pool"] * 4 + ["retention", "maintenance"]
        + ["memory"] * 16 + ["link"] * 3 + ["snapshot"]
    )  # fmt: skip
    robots = ["alice", "bob", "carol", "htm-retention", "idle"]
    assert [x["name"] for x in original[1:6]] == robots

    run = htm("import", str(tmp_path / "a.jsonl"), "--namespace", b)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {b}: 16 added, 0 updated, 2 forgotten, 0 unchanged, "
        "5 robots set, 2 groups set, 4 pools set, 2 namespace settings set, 3 links added, "
        "1 snapshots added"
    )
    copy = export(htm, b, tmp_path / "b.jsonl")
    assert normalised(copy) == normalised(original)
    [read] = [x for x in copy if x.get("key") == "old-read"]
    assert read["access_count"] == 2
    # Retention judges the copy as it judges the original (accesses came along).
    would = []
    for ns in (a, b):
        client.headers["X-Namespace"] = ns
        run = await ok(client.post("/v1/retention/run", json={"dry_run": True}))
        would.append([p["keys"] for p in run["policies"]])
    assert would[0] == would[1] == [[], ["city@2023"]]

    client.headers["X-Namespace"] = b
    # Who reads what came along: carol reads alice's private memory, bob his old group's
    # memory (its author), not the team's; nobody reads the archived pool's.
    r = await client.get("/v1/robots/carol/memories/secret")
    assert r.status_code == 200
    r = await client.get("/v1/robots/bob/memories/team-note")
    assert r.status_code == 404
    assert (await client.get("/v1/robots/alice/memories/bob-team")).status_code == 200
    assert (await client.get("/v1/robots/carol/memories/attic-1")).status_code == 404

    # Again: nothing is written, not a version, not a row.
    listed = await ok(client.get("/v1/robots/alice/memories", params={
        "include_deleted": True, "include": "superseded", "limit": 100,
    }))  # fmt: skip
    pools = await ok(client.get("/v1/pools"))
    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        # Seen an hour ago: a registration on the way would refresh it (a write).
        await s.execute(
            text("UPDATE robot SET last_seen_at = now() - interval '1 hour' WHERE "
                 "namespace_id = (SELECT id FROM namespace WHERE name = :ns)"), {"ns": b},
        )  # fmt: skip
        await s.commit()
    robots = await ok(client.get("/v1/robots"))
    before = await row_counts(client, b)
    run = htm("import", str(tmp_path / "a.jsonl"), "--namespace", b)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == (
        f"imported into namespace {b}: 0 added, 0 updated, 0 forgotten, 16 unchanged"
    )
    assert await row_counts(client, b) == before
    assert (await ok(client.get("/v1/robots/alice/memories", params={
        "include_deleted": True, "include": "superseded", "limit": 100,
    }))) == listed  # fmt: skip
    assert await ok(client.get("/v1/pools")) == pools
    assert await ok(client.get("/v1/robots")) == robots


async def test_a_group_memory_whose_group_was_deleted_stays_its_author_s_alone(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """Its group gone, only its author reads it; exported with `group: null`, it is imported
    as a private memory (the same reader), not as the group memory of its author's group."""
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    client.headers["X-Namespace"] = a
    await ok(client.put("/v1/groups/temp", json={"members": ["carol", "dan"]}))
    body = {"key": "g1", "content": "A group note.", "visibility": "group"}
    await ok(client.post("/v1/robots/carol/memories", json=body))
    await ok(client.delete("/v1/groups/temp"))
    await ok(client.put("/v1/groups/crew", json={"members": ["carol", "dan"]}))
    assert (await client.get("/v1/robots/dan/memories/g1")).status_code == 404
    lines = export(htm, a, tmp_path / "a.jsonl")
    [g1] = [x for x in lines if x.get("key") == "g1"]
    assert (g1["visibility"], g1["group"]) == ("group", None)

    run = htm("import", str(tmp_path / "a.jsonl"), "--namespace", b)
    assert run.returncode == 0, run.stderr
    client.headers["X-Namespace"] = b
    mine = await ok(client.get("/v1/robots/carol/memories/g1"))
    assert (mine["visibility"], mine["readers"]) == ("private", [])
    assert (await client.get("/v1/robots/dan/memories/g1")).status_code == 404
