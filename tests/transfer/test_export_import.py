"""`htm export` and `htm import`: the file's shape, a round trip into another namespace that
answers recall exactly as the original, idempotence, updates, and bad files."""

from __future__ import annotations

import io
import json
import random
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.transfer.conftest import Htm

DIM = 384


def vec(seed: int) -> list[float]:
    rng = random.Random(seed)
    v = [rng.gauss(0, 1) for _ in range(DIM)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


MEMORIES: list[dict[str, Any]] = [
    {"key": "db", "content": "The staging database runs PostgreSQL 18 with pgvector.",
     "tags": ["infra", "postgres"], "importance": 7, "metadata": {"source": "ops", "n": 1},
     "confidence": 0.875, "source": "tool:web"},
    {"key": "cache", "content": "Redis keeps the working memory of each robot.",
     "tags": ["infra"], "importance": 5, "type": "decision", "confidence": 0.0},
    {"key": "deploy",
     "content": "Deploys to staging happen every Tuesday after the database backup.",
     "tags": ["process"], "metadata": {"owner": {"team": "ops"}}},
    {"key": "coffee", "content": "The team prefers espresso over filter coffee.",
     "type": "preference", "importance": 2, "valid_from": "2025-03-05T00:00:00Z",
     "valid_to": "2030-01-01T00:00:00Z"},
    {"key": "backup", "content": "The database backup runs nightly and is kept for 30 days.",
     "tags": ["infra", "postgres"], "importance": 8},
    {"key": "review", "content": "Code review needs two approvals before merging.",
     "tags": ["process"], "importance": 4},
    {"key": "gone", "content": "An old note about the staging database that was forgotten.",
     "tags": ["infra"]},
]  # fmt: skip


async def seed(client: httpx.AsyncClient, ns: str) -> None:
    client.headers["X-Namespace"] = ns
    for i, m in enumerate(MEMORIES):
        body = {**m, "embedding": vec(i), "created_at": f"2025-03-{i + 1:02d}T10:00:00.123456Z"}
        robot = "writer-a" if i % 2 else "writer-b"
        r = await client.post(f"/v1/robots/{robot}/memories", json=body)
        assert r.status_code == 201, r.text
    assert (await client.delete("/v1/robots/writer-a/memories/gone")).status_code == 200
    for key, body in (
        ("db", {"used": True}),
        ("db", {"used": True}),
        ("cache", {"used": False}),
        ("cache", {"pinned": True}),
    ):
        r = await client.post(f"/v1/robots/writer-a/memories/{key}/feedback", json=body)
        assert r.status_code == 202, r.text
    await client.app.state.components.access.flush()  # type: ignore[attr-defined]


async def contents(client: httpx.AsyncClient, ns: str) -> dict[str, dict[str, Any]]:
    client.headers["X-Namespace"] = ns
    params = {"include_deleted": True, "limit": 200, "include": "superseded"}
    r = await client.get("/v1/robots/any/memories", params=params)
    assert r.status_code == 200
    return {
        m["key"]: {
            **{k: m[k] for k in ("content", "type", "importance", "tags", "metadata", "author")},
            **{k: m[k] for k in ("created_at", "embedding_status", "embedding_model")},
            **{k: m[k] for k in ("valid_from", "valid_to", "confidence", "source")},
            **{k: m[k] for k in ("learned_importance", "used_count", "unused_count")},
            **{k: m[k] for k in ("pinned_count", "forgotten_nearby_count")},
            "deleted": m["deleted_at"] is not None,
        }
        for m in r.json()["items"]
    }


async def recalls(client: httpx.AsyncClient, ns: str) -> list[list[str]]:
    client.headers["X-Namespace"] = ns
    asked = [
        {"query": "database", "strategy": "vector", "embedding": vec(4)},
        {"query": "staging database backup", "strategy": "fulltext"},
        {"query": "staging database backup", "strategy": "hybrid", "embedding": vec(0)},
        {"query": "process review", "strategy": "hybrid", "embedding": vec(5)},
    ]
    out = []
    for body in asked:
        # Every live memory ranked, the unrelated too: no floor.
        body = {**body, "limit": 10, "load_into_working_memory": False, "min_score": 0}
        r = await client.post("/v1/robots/asker/recall", json=body)
        assert r.status_code == 200, r.text
        out.append([h["key"] for h in r.json()["hits"]])
    return out


def memory_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The memories' lines of an export (the others have a `kind`)."""
    return [m for m in lines if "kind" not in m]


def summary(run: Any) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


async def test_a_round_trip_into_another_namespace_restores_contents_and_recall_results(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    await seed(client, a)
    out = tmp_path / "a.jsonl"

    run = htm("export", "--namespace", a, "--embeddings", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().endswith(f"exported 7 memories of namespace {a} to {out}")
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    header = lines[0]
    assert {k: header[k] for k in ("format", "version", "namespace", "model", "dimension")} == {
        "format": "htm-export", "version": 3, "namespace": a, "model": None, "dimension": DIM,
    }  # fmt: skip
    assert [x.get("kind") for x in lines[1:3]] == ["robot", "robot"]  # the settings first
    mems = memory_lines(lines[1:])
    assert [m["key"] for m in mems] == [m["key"] for m in MEMORIES]  # oldest first
    assert mems[0]["embedding_model"] == "client" and len(mems[0]["embedding"]) == DIM
    assert [m["key"] for m in mems if m["deleted_at"]] == ["gone"]
    assert [(m["key"], m["confidence"], m["source"]) for m in mems[:3]] == [
        ("db", 0.875, "tool:web"), ("cache", 0.0, None), ("deploy", None, None),
    ]  # fmt: skip
    assert [m["feedback"] for m in mems[:3]] == [
        {
            "scale": pytest.approx(0.64),
            "shift": pytest.approx(3.6),
            "used": 2,
            "unused": 0,
            "pinned": 0,
            "forgotten_nearby": 0,
        },
        # not used (×0.8), then pinned (×0.6 + 4)
        {
            "scale": pytest.approx(0.48),
            "shift": pytest.approx(4.0),
            "used": 0,
            "unused": 1,
            "pinned": 1,
            "forgotten_nearby": 0,
        },
        None,
    ]

    assert summary(htm("import", str(out), "--namespace", b)) == (
        f"imported into namespace {b}: 7 added, 0 updated, 1 forgotten, 0 unchanged, 2 robots set"
    )
    original, restored = await contents(client, a), await contents(client, b)
    assert restored == original
    assert len(restored) == 7 and restored["gone"]["deleted"] is True
    # db: importance 7, used twice (α 0.2): 0.64·7 + 3.6; cache: 5, not used once then
    # pinned: 0.48·5 + 4.
    assert [
        tuple(restored[k][f] for f in ("learned_importance", "used_count", "unused_count",
                                      "pinned_count", "forgotten_nearby_count"))
        for k in ("db", "cache", "deploy")
    ] == [(pytest.approx(8.08), 2, 0, 0, 0), (pytest.approx(6.4), 0, 1, 1, 0),
          (None, 0, 0, 0, 0)]  # fmt: skip
    assert [(restored[k]["confidence"], restored[k]["source"]) for k in ("db", "cache")] == [
        (0.875, "tool:web"), (0.0, None),
    ]  # fmt: skip
    assert (restored["coffee"]["valid_from"], restored["coffee"]["valid_to"]) == (
        "2025-03-05T00:00:00Z",
        "2030-01-01T00:00:00Z",
    )
    assert await recalls(client, b) == await recalls(client, a)
    assert await recalls(client, b) == [  # every live memory ranked: not vacuous
        ["backup", "deploy", "coffee", "review", "cache", "db"],
        ["deploy", "backup", "db"],
        # vector 0.6 / full text 0.4, every candidate scored on both lists: backup shares a
        # word with the question
        ["db", "deploy", "backup", "cache", "coffee", "review"],
        ["review", "cache", "coffee", "deploy", "backup", "db"],
    ]


async def test_importing_the_same_file_again_changes_nothing(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    await seed(client, a)
    out = tmp_path / "a.jsonl"
    assert htm("export", "--namespace", a, "--out", str(out)).returncode == 0
    summary(htm("import", str(out), "--namespace", b))
    client.headers["X-Namespace"] = b
    listed = (await client.get("/v1/robots/x/memories", params={"include_deleted": True})).json()

    assert summary(htm("import", str(out), "--namespace", b)) == (
        f"imported into namespace {b}: 0 added, 0 updated, 0 forgotten, 7 unchanged"
    )
    again = (await client.get("/v1/robots/x/memories", params={"include_deleted": True})).json()
    assert again == listed  # versions and updated_at too


async def test_a_changed_file_updates_forgets_and_adds_through_the_services(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    await seed(client, a)
    out = tmp_path / "a.jsonl"
    assert htm("export", "--namespace", a, "--out", str(out)).returncode == 0
    summary(htm("import", str(out), "--namespace", b))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    by_key = {m["key"]: m for m in memory_lines(lines[1:])}
    by_key["db"]["content"] = "The staging database runs PostgreSQL 19."
    by_key["coffee"]["deleted_at"] = "2025-04-01T00:00:00Z"
    by_key["gone"]["deleted_at"] = None  # restored
    new = {**by_key["review"], "key": "new", "content": "A memory only the file has."}
    out.write_text("\n".join(json.dumps(x) for x in [lines[0], *by_key.values(), new]) + "\n")

    assert summary(htm("import", str(out), "--namespace", b)) == (
        f"imported into namespace {b}: 1 added, 2 updated, 1 forgotten, 4 unchanged"
    )
    now = await contents(client, b)
    assert now["db"]["content"] == "The staging database runs PostgreSQL 19."
    assert (now["coffee"]["deleted"], now["gone"]["deleted"], now["new"]["deleted"]) == (
        True, False, False,
    )  # fmt: skip
    client.headers["X-Namespace"] = b
    db = (await client.get("/v1/robots/x/memories/db")).json()
    assert (db["version"], db["embedding_status"]) == (2, "pending")  # new content, no vector
    stats = (await client.get("/v1/stats")).json()
    # Exported without vectors, on a deployment without a model: all live ones wait.
    counts = (stats["memories"], stats["deleted_memories"], stats["pending_embeddings"])
    assert counts == (7, 1, 7)


async def test_a_bad_line_is_named_and_nothing_is_imported(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    b = f"t-{uuid.uuid4().hex[:12]}"
    good = {"key": "k1", "content": "fine", "author": "r", "created_at": "2025-01-01T00:00:00Z"}
    header = {"format": "htm-export", "version": 1, "namespace": "x", "model": None,
              "dimension": DIM, "exported_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    cases = {
        "tags.0: String should match pattern": {**good, "key": "k2", "tags": ["bad tag"]},
        "key: String should match pattern": {**good, "key": "a/b"},
        "confidence: Input should be less than or equal to 1": {
            **good,
            "key": "k2",
            "confidence": 1.5,
        },
        "source: String should match pattern": {**good, "key": "k2", "source": "-web"},
        "not JSON": "{oops",
    }
    for why, bad in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(
            "\n".join([json.dumps(header), json.dumps(good), bad if isinstance(bad, str)
                       else json.dumps(bad)]) + "\n"
        )  # fmt: skip
        run = htm("import", str(path), "--namespace", b)
        assert run.returncode == 2
        assert f"{path}:3: " in run.stderr and why in run.stderr
        assert "(nothing imported)" in run.stderr
    client.headers["X-Namespace"] = b
    r = await client.get("/v1/robots/x/memories", params={"include_deleted": True})
    assert r.json()["items"] == []


async def test_vectors_are_reused_only_when_this_deployment_could_have_made_them(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    from app.transfer.importer import import_file

    b = f"t-{uuid.uuid4().hex[:12]}"
    base = {"author": "r", "created_at": "2025-01-01T00:00:00Z", "embedding": vec(1)}
    records = [
        {**base, "key": "client", "content": "one", "embedding_model": "client"},
        {**base, "key": "other-model", "content": "two", "embedding_model": "some-model"},
        {**base, "key": "short", "content": "three", "embedding_model": "client",
         "embedding": vec(1)[:10]},
        {"author": "r", "created_at": "2025-01-01T00:00:00Z", "key": "none", "content": "four"},
    ]  # fmt: skip
    header = {"format": "htm-export", "version": 1, "namespace": "x", "model": "some-model",
              "dimension": DIM, "exported_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [header, *records]) + "\n")
    await import_file(client.app.state.components, path, b)  # type: ignore[attr-defined]
    client.headers["X-Namespace"] = b
    items = (await client.get("/v1/robots/x/memories")).json()["items"]
    assert {m["key"]: (m["embedding_status"], m["embedding_model"]) for m in items} == {
        "client": ("ready", "client"),
        "other-model": ("pending", None),  # this deployment has no model: embedded later
        "short": ("pending", None),
        "none": ("pending", None),
    }


async def test_export_streams_pages_of_one_robot_oldest_first(
    client: httpx.AsyncClient, monkeypatch: Any
) -> None:
    from app.transfer import export

    a = f"t-{uuid.uuid4().hex[:12]}"
    await seed(client, a)
    monkeypatch.setattr(export, "PAGE", 2)  # several keyset pages
    buf = io.BytesIO()
    c = client.app.state.components  # type: ignore[attr-defined]
    assert await export.export(c, buf, a, robot="writer-b", embeddings=False) == 4
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert lines[0]["robot"] == "writer-b"
    assert [x["name"] for x in lines[1:] if x.get("kind") == "robot"] == ["writer-b"]
    assert [m["key"] for m in memory_lines(lines[1:])] == ["db", "deploy", "backup", "gone"]
    assert all("embedding" not in m for m in lines[1:])


async def test_import_runs_batches_two_at_a_time_in_file_order_and_places_nothing(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """Batches of 2, two in flight: a key repeated later in the file waits for its first
    line, so the file's last word on each key stands. New memories go to long-term memory
    only; a changed one is PUT, and placed by its author as every PUT is."""
    a, b = f"t-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    await seed(client, a)
    out = tmp_path / "a.jsonl"
    assert htm("export", "--namespace", a, "--out", str(out)).returncode == 0
    header, *lines = [json.loads(x) for x in out.read_text().splitlines()]
    by_key = {m["key"]: m for m in memory_lines(lines)}
    later = [
        {**by_key["cache"], "content": "Redis keeps working memory; Postgres mirrors it."},
        {**by_key["review"], "deleted_at": "2025-04-01T00:00:00Z"},
    ]
    # db cache | deploy coffee | backup review | gone cache' | review (deleted)
    out.write_text("\n".join(json.dumps(x) for x in [header, *lines, *later]) + "\n")

    assert summary(htm("import", str(out), "--namespace", b, "--batch", "2")) == (
        f"imported into namespace {b}: 7 added, 1 updated, 2 forgotten, 0 unchanged, 2 robots set"
    )
    now = await contents(client, b)
    assert now["cache"]["content"] == "Redis keeps working memory; Postgres mirrors it."
    assert {k for k, m in now.items() if m["deleted"]} == {"gone", "review"}
    client.headers["X-Namespace"] = b
    held = {
        robot: [
            i["key"]
            for i in (await client.get(f"/v1/robots/{robot}/working-memory")).json()["items"]
        ]
        for robot in ("writer-a", "writer-b")
    }
    assert held == {"writer-a": ["cache"], "writer-b": []}
    assert htm("import", str(out), "--batch", "0").returncode == 2


async def test_an_import_supersedes_only_what_the_file_says(
    client: httpx.AsyncClient, htm: Htm, tmp_path: Path
) -> None:
    """With the detector on (HTM_SUPERSEDE=apply), `city@2025` would supersede `city@2024`
    (the key family rule): an import (and `htm load`, the same path) adds what the file has,
    superseding only what its lines name."""
    b = f"t-{uuid.uuid4().hex[:12]}"
    header = {"format": "htm-export", "version": 1, "namespace": "x", "model": None,
              "dimension": DIM, "exported_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    lines = [
        {"key": f"city@{y}", "content": f"Lives in city {y}", "author": "r",
         "created_at": f"{y}-01-01T00:00:00Z"}
        for y in (2024, 2025)
    ]  # fmt: skip
    path = tmp_path / "f.jsonl"
    for n in (1, 2):  # city@2024 in first
        path.write_text("\n".join(json.dumps(x) for x in [header, *lines[:n]]) + "\n")
        run = htm("import", str(path), "--namespace", b, HTM_SUPERSEDE="apply")
        assert summary(run) == (
            f"imported into namespace {b}: 1 added, 0 updated, 0 forgotten, {n - 1} unchanged"
        )
    client.headers["X-Namespace"] = b
    r = await client.get("/v1/robots/r/memories/city@2024")
    assert (r.status_code, r.json()["superseded_by"], r.json()["valid_to"]) == (200, None, None)
