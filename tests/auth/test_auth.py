"""API keys: roles, hashing, revocation, the CLI, and namespace isolation route by route."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid

import pytest
from sqlalchemy import text

from app.auth import keys
from app.openapi import SPEC_PATH

PROBLEM = "application/problem+json"


@pytest.fixture
async def auth_client(app_factory):
    async with app_factory(auth_enabled=True) as client:
        yield client


async def make_key(client, namespace: str, role: str, name: str = "k") -> str:
    """Bootstrap a key straight through the service layer, as `htm keys create` does."""
    from app.auth.schemas import ApiKeyCreate
    from app.auth.service import ApiKeyService
    from app.namespaces.repository import NamespaceRepository

    res = client.app.state.resources
    ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, namespace)
    async with res.sessionmaker() as session, session.begin():
        created = await ApiKeyService(session, ns_id, res.key_cache).create(
            namespace, ApiKeyCreate(name=name, role=role)
        )
    return created.key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_requests_without_a_valid_key_are_401_problem_json(auth_client) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}, bearer("htm_not-a-real-key")):
        r = await auth_client.get("/v1/robots", headers=headers)
        assert r.status_code == 401
        assert r.headers["content-type"] == PROBLEM
        assert r.headers["www-authenticate"] == "Bearer"
    # Liveness and readiness stay open for orchestrators.
    assert (await auth_client.get("/healthz")).status_code == 200


async def test_roles_reader_writer_admin(auth_client) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    admin, writer, reader = [
        await make_key(auth_client, ns, r) for r in ("admin", "writer", "reader")
    ]
    add = {"content": "hello", "key": "h"}

    r = await auth_client.post("/v1/robots/a/memories", json=add, headers=bearer(reader))
    assert (r.status_code, r.json()["required"]) == (403, "writer")
    r = await auth_client.post("/v1/robots/a/memories", json=add, headers=bearer(writer))
    assert r.status_code == 201
    assert (
        await auth_client.get("/v1/robots/a/memories/h", headers=bearer(reader))
    ).status_code == 200
    r = await auth_client.post(
        "/v1/robots/a/recall", json={"query": "hello"}, headers=bearer(reader)
    )
    assert r.status_code == 403
    r = await auth_client.delete("/v1/robots/a/memories/h", headers=bearer(reader))
    assert r.status_code == 403

    for key in (reader, writer):
        assert (await auth_client.get("/v1/keys", headers=bearer(key))).status_code == 403
    r = await auth_client.post(
        "/v1/keys", json={"name": "bot", "role": "writer"}, headers=bearer(admin)
    )
    assert r.status_code == 201
    created = r.json()
    assert created["key"].startswith("htm_") and created["namespace"] == ns
    assert created["prefix"] == created["key"][:10]
    listed = (await auth_client.get("/v1/keys", headers=bearer(admin))).json()
    assert [k["role"] for k in listed] == ["admin", "writer", "reader", "writer"]
    assert all("key" not in k for k in listed)


async def test_keys_are_stored_only_as_hashes_and_revocation_is_immediate(auth_client) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    admin = await make_key(auth_client, ns, "admin")
    r = await auth_client.post(
        "/v1/keys", json={"name": "tmp", "role": "reader"}, headers=bearer(admin)
    )
    secret, key_id = r.json()["key"], r.json()["id"]
    assert (await auth_client.get("/v1/robots", headers=bearer(secret))).status_code == 200

    res = auth_client.app.state.resources
    async with res.sessionmaker() as s:
        stored = (
            await s.execute(text("SELECT key_hash FROM api_key WHERE id = :i"), {"i": key_id})
        ).scalar_one()
        everything = (
            (await s.execute(text("SELECT row_to_json(k)::text FROM api_key k"))).scalars().all()
        )
    assert stored == keys.digest(secret)
    assert not any(secret in row for row in everything)

    r = await auth_client.delete(f"/v1/keys/{key_id}", headers=bearer(admin))
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert (await auth_client.get("/v1/robots", headers=bearer(secret))).status_code == 401


async def test_x_namespace_is_ignored_when_auth_is_on(auth_client) -> None:
    ns_a, ns_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    key_a = await make_key(auth_client, ns_a, "writer")
    key_b = await make_key(auth_client, ns_b, "writer")
    await auth_client.post(
        "/v1/robots/r/memories", json={"content": "b's", "key": "bk"}, headers=bearer(key_b)
    )
    r = await auth_client.get(
        "/v1/robots/r/memories/bk", headers={**bearer(key_a), "X-Namespace": ns_b}
    )
    assert r.status_code == 404


# --- isolation, route by route from the committed spec ------------------------------------

BODIES = {
    "memories-add": {"content": "a's own memory", "key": "bk"},
    "memories-add-batch": {"memories": [{"content": "batch", "key": "bk-batch"}]},
    "memories-put": {"content": "a's own upsert"},
    "recall-search": {"query": "which secret does the namespace keep?"},
    "robots-put": {"working_memory_budget": 1000},
    "keys-create": {"name": "a-key", "role": "reader"},
}


MUST_BE_404 = {
    "memories-get",
    "memories-forget",
    "memories-restore",
    "robots-get",
    "context-get",
    "stats-robot",
    "working-memory-get",
    "working-memory-clear",
    "keys-revoke",
}


def spec_operations() -> list[tuple[str, str, str]]:
    spec = json.loads(SPEC_PATH.read_text())
    return sorted(
        (method.upper(), path, op["operationId"])
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if path.startswith("/v1/")
    )


async def test_a_key_of_namespace_a_never_sees_or_changes_namespace_b(auth_client) -> None:
    ns_a, ns_b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    key_a = await make_key(auth_client, ns_a, "admin")
    key_b = await make_key(auth_client, ns_b, "admin")
    hb = bearer(key_b)
    # Namespace B: robot "bob" with a memory "bk" in working memory, and a key.
    assert (
        await auth_client.post(
            "/v1/robots/bob/memories",
            headers=hb,
            json={"content": "secret of namespace b", "key": "bk"},
        )
    ).status_code == 201
    b_key_id = (await auth_client.get("/v1/keys", headers=hb)).json()[0]["id"]

    async def b_state() -> tuple:
        mem = (await auth_client.get("/v1/robots/bob/memories/bk", headers=hb)).json()
        wm = (await auth_client.get("/v1/robots/bob/working-memory", headers=hb)).json()
        keys_b = (await auth_client.get("/v1/keys", headers=hb)).json()
        robots = (await auth_client.get("/v1/robots", headers=hb)).json()
        return (
            mem["content"],
            mem["deleted_at"],
            [i["key"] for i in wm["items"]],
            [(k["id"], k["revoked_at"]) for k in keys_b],
            [rb["name"] for rb in robots],
        )

    before = await b_state()
    ops = spec_operations()
    assert len(ops) == 19
    ha = bearer(key_a)
    # First everything that names B's robot, memory or key (A has none of them: 404), then
    # everything that creates: "bob" and "bk" made in A must succeed, never answer 409.
    ops.sort(key=lambda op: op[2] not in MUST_BE_404)
    for method, path, op_id in ops:
        url = path.replace("{robot}", "bob").replace("{key}", "bk")
        url = url.replace("{key_id}", str(b_key_id))
        r = await auth_client.request(method, url, headers=ha, json=BODIES.get(op_id))
        body = r.text
        assert "secret of namespace b" not in body, (op_id, body)
        assert ns_b not in body, (op_id, body)
        if op_id in MUST_BE_404:
            assert r.status_code == 404, (op_id, r.status_code, body)
            assert r.headers["content-type"] == PROBLEM
        else:
            assert r.status_code in {200, 201}, (op_id, r.status_code, body)
    assert await b_state() == before


# --- the CLI --------------------------------------------------------------------------------


def test_htm_keys_cli_creates_lists_and_revokes(database_url) -> None:
    env = {"HTM_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"}
    ns = f"cli-{uuid.uuid4().hex[:8]}"

    def htm(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "app.cli", "keys", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    created = htm("create", "--namespace", ns, "--role", "writer", "--name", "ci-bot")
    secret = created.strip().splitlines()[-1]
    assert re.fullmatch(r"htm_[A-Za-z0-9_-]{43}", secret)
    key_id = int(re.search(r"created key (\d+)", created).group(1))
    listing = htm("list", "--namespace", ns)
    assert listing == f"{key_id}\t{secret[:10]}…\twriter\tci-bot\tactive\n"
    assert htm("revoke", str(key_id), "--namespace", ns) == f"revoked key {key_id} (ci-bot)\n"
    assert "\trevoked " in htm("list", "--namespace", ns)


async def test_key_lookup_is_constant_time_comparison_of_hashes() -> None:
    secret = keys.generate()
    assert keys.matches(secret, keys.digest(secret))
    assert not keys.matches(secret[:-1] + ("A" if secret[-1] != "A" else "B"), keys.digest(secret))
    await asyncio.sleep(0)
