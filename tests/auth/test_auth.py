"""API keys: roles, hashing, revocation, the CLI, and namespace isolation route by route."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid

import pytest
from sqlalchemy import text

from app.auth import keys
from app.embedded import free_port
from app.http.openapi import SPEC_PATH

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

    res = client.app.state.components
    ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, namespace)
    async with res.sessionmaker() as session, session.begin():
        created = await ApiKeyService(
            session=session, namespace_id=ns_id, cache=res.key_cache
        ).create(namespace, ApiKeyCreate(name=name, role=role))
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

    res = auth_client.app.state.components
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
    "facts-extract": {"keys": ["bk"]},
    "state-put": {"value": "a's own state"},
    "memories-add": {"content": "a's own memory", "key": "bk"},
    "memories-add-batch": {"memories": [{"content": "batch", "key": "bk-batch"}]},
    "memories-put": {"content": "a's own upsert"},
    "recall-search": {"query": "which secret does the namespace keep?"},
    "robots-put": {"working_memory_budget": 1000},
    "keys-create": {"name": "a-key", "role": "reader"},
    "memories-importance": {"boost": 1},
    "memories-feedback": {"used": True},
    "tags-rename": {"from": "secret", "to": "public"},
    "sessions-append": {"messages": [{"role": "user", "content": "a's own message"}]},
    "prompt-assemble": {"input": "which secret?", "session": "s1", "context_window": 4000},
    "groups-put": {"members": ["bob"]},
    "retention-put": {"policies": [{"rule": "idle", "days": 1}]},
    "retention-run": {"dry_run": False},
    "maintenance-put": {"schedule": None, "steps": ["supersede"]},
    "pools-put": {"type": "shared", "writers": ["bob"]},
    "pools-grant": {"level": "read"},
    "profiles-patch": {"slots": {"secret": "a's own"}},
    "snapshots-create": {"name": "a's own"},
    "memories-link": {"target": "bk-other"},
    "entities-aliases-put": {"aliases": {"secretive": "secret"}},
}


MUST_BE_404 = {
    "facts-extract",
    "state-get",
    "state-list",
    "state-delete",
    "memories-get",
    "memories-forget",
    "memories-restore",
    "memories-versions",
    "memories-history",
    "memories-link",
    "memories-unlink",
    "memories-related",
    "memories-version-restore",
    "memories-importance",
    "memories-feedback",
    "robots-get",
    "robots-delete",
    "context-get",
    "stats-robot",
    "working-memory-get",
    "working-memory-clear",
    "keys-revoke",
    "sessions-window",
    "sessions-end",
    "groups-get",
    "groups-delete",
    "working-memory-events",  # before A has a bob: a 404, not a stream that never ends
    "pools-get",
    "pools-delete",
    "pools-grant",
    "pools-revoke",
    "snapshots-list",
    "snapshots-get",  # B's snapshot id: A's bob has none of that id (nor any bob, yet)
    "snapshots-delete",
    "snapshots-restore",
    "profiles-get",
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
            json={"content": "secret of namespace b", "key": "bk", "tags": ["secret:b"]},
        )
    ).status_code == 201
    b_key_id = (await auth_client.get("/v1/keys", headers=hb)).json()[0]["id"]
    assert (
        await auth_client.post(
            "/v1/robots/bob/sessions/s1/messages",
            headers=hb,
            json={"messages": [{"role": "user", "content": "secret of namespace b"}]},
        )
    ).status_code == 201
    r = await auth_client.put("/v1/groups/team", headers=hb, json={"members": ["carol"]})
    assert r.status_code == 200
    policies = {"policies": [{"rule": "superseded", "days": 7}]}
    assert (await auth_client.put("/v1/retention", headers=hb, json=policies)).status_code == 200
    schedule = {"schedule": "0 4 * * *", "steps": ["dedupe"]}
    assert (await auth_client.put("/v1/maintenance", headers=hb, json=schedule)).status_code == 200
    assert (await auth_client.post("/v1/maintenance/run", headers=hb)).status_code == 200
    pool = {"type": "team", "writers": ["bob"]}
    assert (await auth_client.put("/v1/pools/ops", headers=hb, json=pool)).status_code == 200
    pooled = {"content": "secret of namespace b", "key": "pk", "pool": "ops"}
    r = await auth_client.post("/v1/robots/bob/memories", headers=hb, json=pooled)
    assert r.status_code == 201
    r = await auth_client.patch(
        "/v1/robots/bob/profiles/b", headers=hb, json={"slots": {"secret": "secret of namespace b"}}
    )
    assert r.status_code == 200
    r = await auth_client.post("/v1/robots/bob/snapshots", headers=hb, json={"name": "b"})
    assert r.status_code == 201
    b_snapshot = r.json()["id"]
    aliases = {"aliases": {"bobby": "bob"}}
    assert (
        await auth_client.put("/v1/entities/aliases", headers=hb, json=aliases)
    ).status_code == 200

    async def b_state() -> tuple:
        mem = (await auth_client.get("/v1/robots/bob/memories/bk", headers=hb)).json()
        wm = (await auth_client.get("/v1/robots/bob/working-memory", headers=hb)).json()
        keys_b = (await auth_client.get("/v1/keys", headers=hb)).json()
        robots = (await auth_client.get("/v1/robots", headers=hb)).json()
        session = (await auth_client.get("/v1/robots/bob/sessions/s1/messages", headers=hb)).json()
        groups = (await auth_client.get("/v1/groups", headers=hb)).json()
        retention = (await auth_client.get("/v1/retention", headers=hb)).json()
        maintenance = (await auth_client.get("/v1/maintenance", headers=hb)).json()
        runs = (await auth_client.get("/v1/maintenance/runs", headers=hb)).json()
        snaps = (await auth_client.get("/v1/robots/bob/snapshots", headers=hb)).json()
        snap = (await auth_client.get(f"/v1/robots/bob/snapshots/{b_snapshot}", headers=hb)).json()
        profile = (await auth_client.get("/v1/robots/bob/profiles/b", headers=hb)).json()
        pools = (await auth_client.get("/v1/pools/ops", headers=hb)).json()
        aliases = (await auth_client.get("/v1/entities/aliases", headers=hb)).json()
        return (
            aliases,
            pools,
            snaps,
            snap,
            profile,
            retention,
            maintenance,
            runs,
            [(g["name"], g["members"]) for g in groups],
            [m["content"] for m in session["messages"]],
            mem["content"],
            mem["tags"],
            mem["version"],
            mem["deleted_at"],
            [i["key"] for i in wm["items"]],
            [(k["id"], k["revoked_at"]) for k in keys_b],
            [rb["name"] for rb in robots],
        )

    before = await b_state()
    ops = spec_operations()
    assert len(ops) == 68
    ha = bearer(key_a)
    # First everything that names B's robot, memory or key (A has none of them: 404), then
    # everything that creates: "bob" and "bk" made in A must succeed, never answer 409.
    ops.sort(key=lambda op: op[2] not in MUST_BE_404)
    for method, path, op_id in ops:
        url = path.replace("{robot}", "bob").replace("{key}", "bk")
        url = url.replace("{key_id}", str(b_key_id)).replace("{version}", "1")
        url = url.replace("{session}", "s1").replace("{group}", "team")
        url = url.replace("{pool}", "ops")
        url = url.replace("{snapshot_id}", str(b_snapshot)).replace("{subject}", "b")
        url = url.replace("{target}", "bk").replace("{entity}", "bob")
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
    assert listing == f"{key_id}\t{secret[:10]}…\twriter\tci-bot\t-\tactive\n"
    assert htm("revoke", str(key_id), "--namespace", ns) == f"revoked key {key_id} (ci-bot)\n"
    assert "\trevoked " in htm("list", "--namespace", ns)


async def test_key_lookup_is_constant_time_comparison_of_hashes() -> None:
    secret = keys.generate()
    assert keys.matches(secret, keys.digest(secret))
    assert not keys.matches(secret[:-1] + ("A" if secret[-1] != "A" else "B"), keys.digest(secret))
    await asyncio.sleep(0)


# --- the key cache: revocation everywhere within 1 s, cheap rejection, little bookkeeping --


async def test_a_revocation_reaches_another_process_within_a_second(app_factory) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as a, app_factory(auth_enabled=True) as b:
        admin = await make_key(a, ns, "admin")
        r = await a.post("/v1/keys", json={"name": "tmp", "role": "reader"}, headers=bearer(admin))
        secret, key_id = r.json()["key"], r.json()["id"]
        # Both processes know (and cache) the key.
        for app in (a, b):
            assert (await app.get("/v1/robots", headers=bearer(secret))).status_code == 200
        assert (await a.delete(f"/v1/keys/{key_id}", headers=bearer(admin))).status_code == 200
        revoked = time.monotonic()
        assert (await a.get("/v1/robots", headers=bearer(secret))).status_code == 401
        # The other process may accept the key from its cache for up to a second: every
        # request it starts later is refused.
        statuses = []
        while (started := time.monotonic() - revoked) < 1.25:
            r = await b.get("/v1/robots", headers=bearer(secret))
            statuses.append((round(started, 3), r.status_code))
            await asyncio.sleep(0.02)
    assert {status for _, status in statuses} <= {200, 401}
    late = [status for started, status in statuses if started >= 1.0]
    assert late and set(late) == {401}, statuses


async def test_a_lookup_that_read_a_key_before_its_revocation_does_not_cache_it(
    auth_client,
) -> None:
    from app.auth.service import ApiKeyService, authenticate
    from app.namespaces.repository import NamespaceRepository

    ns = f"t-{uuid.uuid4().hex[:10]}"
    secret = await make_key(auth_client, ns, "reader")  # never used: last_used_at is due
    res = auth_client.app.state.components
    ns_id = await NamespaceRepository.resolve(res.sessionmaker, res.namespace_ids, ns)
    async with res.sessionmaker() as session:
        key_id = (
            await ApiKeyService(session=session, namespace_id=ns_id, cache=res.key_cache).list()
        )[0].id

    async with res.sessionmaker() as session, session.begin():
        await ApiKeyService(session=session, namespace_id=ns_id, cache=res.key_cache).revoke(key_id)
        # The revoke is not committed: a lookup now reads the unrevoked row, then waits on
        # the row's lock to record the use.
        lookup = asyncio.create_task(authenticate(res.sessionmaker, res.key_cache, secret))
        await wait_for_lock_wait(res.engine)
    # Committed, and the cache cleared; then the lookup finishes with what it read before.
    assert await lookup is not None
    assert await authenticate(res.sessionmaker, res.key_cache, secret) is None
    assert (await auth_client.get("/v1/robots", headers=bearer(secret))).status_code == 401


async def wait_for_lock_wait(engine) -> None:
    """Until a session waits for a lock on an api_key statement (pg_stat_activity is read
    afresh each time: within one transaction it would be a snapshot). Other test workers share
    the server: their lock waits (adds' dedupe locks, speaker inserts) must not count."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query ILIKE '%api_key%'"
    )
    for _ in range(200):
        async with engine.connect() as conn:
            if (await conn.execute(query)).scalar_one():
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the lookup never waited for the revoke's row lock")


def test_the_cache_ignores_an_answer_from_a_lookup_older_than_a_revocation() -> None:
    from app.auth.service import KeyCache

    cache = KeyCache()
    before = cache.lookup()
    cache.clear()
    cache.put(b"h", (1, "ns", "reader", 7), before)
    assert cache.get(b"h") is None
    cache.put(b"h", (1, "ns", "reader", 7), cache.lookup())
    assert cache.get(b"h") == (1, "ns", "reader", 7)


def test_the_cache_of_unknown_keys_is_bounded_and_expires() -> None:
    from app.auth.service import KeyCache

    cache = KeyCache(unknown_max=3, unknown_ttl_s=0.05)
    for h in (b"a", b"b", b"c", b"d"):
        cache.put_unknown(h)
    assert [cache.is_unknown(h) for h in (b"a", b"b", b"c", b"d")] == [False, True, True, True]
    time.sleep(0.06)
    assert not cache.is_unknown(b"d")


def count_checkouts(client) -> list[int]:
    """Connections the app checks out of its pool (every database lookup takes one)."""
    from sqlalchemy import event

    seen = [0]

    def checkout(*_args: object) -> None:
        seen[0] += 1

    event.listen(client.app.state.components.engine.sync_engine, "checkout", checkout)
    return seen


async def test_malformed_tokens_are_rejected_without_touching_the_database(app_factory) -> None:
    # The database is unreachable: a token that needed a lookup would be a 503.
    dead = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/htm"
    well_formed = keys.generate()
    malformed = [
        "htm_short",
        well_formed + "x",
        "xyz_" + well_formed[4:],
        well_formed[:-1] + "!",
        well_formed[:-1] + "é",
        "x" * 10_000,
    ]
    async with app_factory(auth_enabled=True, database_url=dead) as client:
        for token in malformed:
            header = f"Bearer {token}".encode("latin-1")  # as sent: bytes, é included
            r = await client.get("/v1/robots", headers={"Authorization": header})
            assert (r.status_code, r.headers["content-type"]) == (401, PROBLEM), token
        r = await client.get("/v1/robots", headers=bearer(well_formed))
        assert (r.status_code, r.json()["dependency"]) == (503, "postgres")


async def test_an_unknown_key_is_looked_up_once(auth_client) -> None:
    checkouts = count_checkouts(auth_client)
    unknown = keys.generate()
    for _ in range(5):
        assert (await auth_client.get("/v1/robots", headers=bearer(unknown))).status_code == 401
    assert checkouts[0] == 1


async def test_last_used_at_is_written_at_most_once_a_minute_and_a_reader_writes_nothing_else(
    auth_client,
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    writer = await make_key(auth_client, ns, "writer")
    reader = await make_key(auth_client, ns, "reader", name="r")
    r = await auth_client.post(
        "/v1/robots/a/memories", json={"content": "hello", "key": "h"}, headers=bearer(writer)
    )
    assert r.status_code == 201
    res = auth_client.app.state.components

    async def last_used() -> tuple:
        async with res.engine.connect() as conn:
            return tuple(
                (
                    await conn.execute(
                        text("SELECT last_used_at, xmin::text FROM api_key WHERE key_hash = :h"),
                        {"h": keys.digest(reader)},
                    )
                ).one()
            )

    assert (await last_used())[0] is None
    assert (await auth_client.get("/v1/robots", headers=bearer(reader))).status_code == 200
    first = await last_used()
    assert first[0] is not None

    # Every GET a reader makes, each with a fresh lookup of its key: no row written anywhere.
    checkouts = count_checkouts(auth_client)
    paths = (
        "/v1/robots",
        "/v1/robots/a",
        "/v1/robots/a/memories",
        "/v1/robots/a/memories/h",  # a retrieve: no access logged, no working memory touched
        "/v1/robots/stranger/memories/h",  # nor a robot registered
        "/v1/robots/a/context",
        "/v1/robots/a/working-memory",
        "/v1/stats",
        "/v1/tags",
    )
    for path in paths:
        res.key_cache.clear()
        before = await next_xid(res.engine)
        r = await auth_client.get(path, headers=bearer(reader))
        assert r.status_code in {200, 404}, (path, r.text)
        assert await rows_written_since(res.engine, before) == {}, path
    assert checkouts[0] >= len(paths)
    assert await last_used() == first  # not even last_used_at: it is less than a minute old

    # Once it is older than a minute, the next lookup records the use again.
    async with res.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE api_key SET last_used_at = now() - interval '61 seconds'"
                " WHERE key_hash = :h"
            ),
            {"h": keys.digest(reader)},
        )
    res.key_cache.clear()
    assert (await auth_client.get("/v1/robots", headers=bearer(reader))).status_code == 200
    assert (await last_used())[0] > first[0]


async def next_xid(engine) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(text("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))
            ).scalar_one()
        )


async def rows_written_since(engine, xid: int) -> dict[str, int]:
    """Rows of the service's tables that a transaction from `xid` on inserted, updated or
    locked (tests run in epoch 0, so the 32-bit xmin compares with the 64-bit xid)."""
    written = {}
    async with engine.connect() as conn:
        tables = (
            await conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
            )
        ).scalars()
        for table in tables:
            n = (
                await conn.execute(
                    text(
                        f'SELECT count(*) FROM "{table}" WHERE xmin::text::bigint >= :x'
                        " OR xmax::text::bigint >= :x"
                    ),
                    {"x": xid},
                )
            ).scalar_one()
            if n:
                written[table] = n
    return written


async def test_a_read_in_an_existing_namespace_writes_nothing_with_auth_off(
    app_factory, ns: str
) -> None:
    async with app_factory() as client:
        client.headers["X-Namespace"] = ns
        assert (await client.get("/v1/robots")).status_code == 200  # creates the namespace
    # A new process (its namespace cache empty) looks the namespace up: a read, not an upsert.
    async with app_factory() as client:
        client.headers["X-Namespace"] = ns
        engine = client.app.state.components.engine
        before = await next_xid(engine)
        assert (await client.get("/v1/robots")).status_code == 200
        assert await rows_written_since(engine, before) == {}


async def test_a_session_window_needs_a_writer_as_its_read_refreshes_the_session(
    auth_client,
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    writer, reader = [await make_key(auth_client, ns, r) for r in ("writer", "reader")]
    path = "/v1/robots/a/sessions/s/messages"
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await auth_client.post(path, json=body, headers=bearer(writer))).status_code == 201
    r = await auth_client.get(path, headers=bearer(reader))
    assert (r.status_code, r.json()["required"]) == (403, "writer")
    r = await auth_client.get(path, headers=bearer(writer))
    assert (r.status_code, [m["content"] for m in r.json()["messages"]]) == (200, ["hi"])
