"""`htm retention`: what each policy would archive (--dry-run), then archiving it."""

from __future__ import annotations

import httpx

from tests.transfer.conftest import Htm


async def test_dry_run_then_run(client: httpx.AsyncClient, htm: Htm, ns: str) -> None:
    for key, at in (("old", "2020-01-01T00:00:00Z"), ("older", "2019-01-01T00:00:00Z")):
        body = {"key": key, "content": f"{key} note", "created_at": at}
        assert (await client.post("/v1/robots/a/memories", json=body)).status_code == 201
    await client.post("/v1/robots/a/memories", json={"key": "new", "content": "new note"})
    policies = [{"rule": "superseded", "days": 1}, {"rule": "idle", "days": 30}]
    assert (await client.put("/v1/retention", json={"policies": policies})).status_code == 200

    dry = htm("retention", "--namespace", ns, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == ["superseded 1d: 0", "idle 30d: 2: older, old"]
    assert dry.stderr.strip().endswith(
        f"2 memories of namespace {ns} would be archived (dry run: nothing changed)"
    )
    listed = (await client.get("/v1/robots/a/memories")).json()["items"]
    assert sorted(m["key"] for m in listed) == ["new", "old", "older"]

    run = htm("retention", "--namespace", ns)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["superseded 1d: 0", "idle 30d: 2: older, old"]
    assert run.stderr.strip().endswith(f"2 memories of namespace {ns} archived")
    listed = (await client.get("/v1/robots/a/memories")).json()["items"]
    assert [m["key"] for m in listed] == ["new"]
    r = await client.get("/v1/robots/a/memories/old", params={"include_deleted": "true"})
    assert r.json()["archived"] == "idle"
