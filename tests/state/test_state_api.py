"""A robot's state keys (issue 48, items 1 and 2) over HTTP, on real PostgreSQL and Redis:
versions and compare-and-set, expiry by the app's clock, the group's blackboard, the change
stream's `state` event, Redis losing its data or missing a write, and pinned notes placed in
every prompt within its exact budget."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import tiktoken

from app.embedded import EmbeddedRedis
from app.working_memory.events import event_data
from app.working_memory.store import robot_keys

PROBLEM = "application/problem+json"
ENC = tiktoken.get_encoding("cl100k_base")
T0 = datetime(2031, 5, 6, 8, 0, 0, 123457, tzinfo=UTC)


def toks(s: str) -> int:
    return len(ENC.encode(s))


def count_chat(messages: list[dict[str, str]]) -> int:
    """OpenAI's rule, computed independently of the service."""
    return 3 + sum(3 + toks(m["role"]) + toks(m["content"]) for m in messages)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


def frozen(client: httpx.AsyncClient) -> Clock:
    clock = Clock()
    client.app.state.components.clock.set(clock)  # type: ignore[attr-defined]
    return clock


async def put(client: httpx.AsyncClient, path: str, body: dict[str, Any], **headers: str):
    return await client.put(f"/v1/robots/{path}", json=body, headers=headers)


async def redis_copy(client: httpx.AsyncClient, holder: str, key: str) -> str | None:
    store = client.app.state.components.two_tier.store  # type: ignore[attr-defined]
    return await store._redis.hget(robot_keys(client.headers["X-Namespace"], holder).state, key)


async def test_put_get_delete_with_versions_as_etags(client: httpx.AsyncClient) -> None:
    frozen(client)
    r = await put(client, "a/state/plan", {"value": {"step": 1, "todo": ["x", "y"]}})
    assert r.status_code == 200, r.text
    first = r.json()
    assert r.headers["etag"] == f'"{first["version"]}"'
    assert {k: first[k] for k in ("robot", "scope", "key", "value", "pinned", "expires_at")} == {
        "robot": "a", "scope": "robot", "key": "plan", "value": {"step": 1, "todo": ["x", "y"]},
        "pinned": False, "expires_at": None,
    }  # fmt: skip
    assert (first["updated_by"], first["tokens"]) == (
        "a",
        toks('plan: {"step":1,"todo":["x","y"]}'),
    )

    got = await client.get("/v1/robots/a/state/plan")  # from the Redis copy the PUT wrote
    assert (got.status_code, got.json(), got.headers["etag"]) == (200, first, r.headers["etag"])

    r = await put(client, "a/state/plan", {"value": "done"}, **{"If-Match": r.headers["etag"]})
    assert r.status_code == 200
    second = r.json()
    assert second["version"] > first["version"]
    assert second["created_at"] == first["created_at"]
    assert (await client.get("/v1/robots/a/state/plan")).json() == second

    # An old version, or a bare number that is not the current one: 412, nothing written.
    stale = await put(client, "a/state/plan", {"value": 0}, **{"If-Match": str(first["version"])})
    assert stale.status_code == 412
    assert stale.headers["content-type"] == PROBLEM
    assert stale.json()["version"] == second["version"]
    gone = await client.delete(
        "/v1/robots/a/state/plan", headers={"If-Match": str(first["version"])}
    )
    assert gone.status_code == 412
    assert (await client.get("/v1/robots/a/state/plan")).json() == second

    r = await client.delete("/v1/robots/a/state/plan", headers={"If-Match": str(second["version"])})
    assert (r.status_code, r.content) == (204, b"")
    assert (await client.get("/v1/robots/a/state/plan")).status_code == 404
    assert (await client.delete("/v1/robots/a/state/plan")).status_code == 404

    # Re-created: a version above the delete's tombstone in Redis, so the copy is new.
    r = await put(client, "a/state/plan", {"value": 3})
    assert r.json()["version"] > second["version"]
    assert (await client.get("/v1/robots/a/state/plan")).json()["value"] == 3


async def test_if_none_match_creates_only_and_if_match_needs_the_key(
    client: httpx.AsyncClient,
) -> None:
    frozen(client)
    assert (await put(client, "a/state/k", {"value": 1}, **{"If-Match": "*"})).status_code == 412
    assert (await put(client, "a/state/k", {"value": 1}, **{"If-Match": '"7"'})).status_code == 412
    created = await put(client, "a/state/k", {"value": 1}, **{"If-None-Match": "*"})
    assert created.status_code == 200
    again = await put(client, "a/state/k", {"value": 2}, **{"If-None-Match": "*"})
    assert (again.status_code, again.json()["version"]) == (412, created.json()["version"])
    assert (await put(client, "a/state/k", {"value": 2}, **{"If-Match": "*"})).status_code == 200
    bad = await put(client, "a/state/k", {"value": 2}, **{"If-Match": "v1"})
    assert (bad.status_code, bad.headers["content-type"]) == (422, PROBLEM)


async def test_concurrent_puts_with_the_same_if_match_have_exactly_one_winner(
    client: httpx.AsyncClient,
) -> None:
    frozen(client)
    base = (await put(client, "a/state/lock", {"value": "free"})).headers["etag"]
    replies = await asyncio.gather(
        *(put(client, "a/state/lock", {"value": f"held by {i}"}, **{"If-Match": base})
          for i in range(10))
    )  # fmt: skip
    codes = [r.status_code for r in replies]
    assert sorted(codes) == [200] + [412] * 9
    winner = replies[codes.index(200)].json()
    assert all(r.json()["version"] == winner["version"] for r in replies if r.status_code == 412)
    assert (await client.get("/v1/robots/a/state/lock")).json() == winner


async def test_a_key_expires_at_the_instant_for_every_reader(client: httpx.AsyncClient) -> None:
    clock = frozen(client)
    assert (await put(client, "a/state/short", {"value": "x", "ttl_s": 60})).status_code == 200
    assert (await put(client, "a/state/long", {"value": "y"})).status_code == 200
    assert (await client.get("/v1/robots/a/state/short")).json()["expires_at"] == (
        (T0 + timedelta(seconds=60)).isoformat().replace("+00:00", "Z")
    )

    clock.t = T0 + timedelta(seconds=60) - timedelta(microseconds=1)
    assert (await client.get("/v1/robots/a/state/short")).status_code == 200
    listed = (await client.get("/v1/robots/a/state")).json()
    assert [i["key"] for i in listed["items"]] == ["long", "short"]

    clock.t = T0 + timedelta(seconds=60)
    assert await redis_copy(client, "a", "short") is not None  # Redis still has its copy
    assert (await client.get("/v1/robots/a/state/short")).status_code == 404
    listed = (await client.get("/v1/robots/a/state")).json()
    assert [i["key"] for i in listed["items"]] == ["long"]
    assert (await client.delete("/v1/robots/a/state/short")).status_code == 404
    # Gone for PostgreSQL's reads too (no Redis copy).
    await client.app.state.components.two_tier.store._redis.delete(  # type: ignore[attr-defined]
        robot_keys(client.headers["X-Namespace"], "a").state
    )
    assert (await client.get("/v1/robots/a/state/short")).status_code == 404
    # The key can be written again: the expired row was purged by this write.
    r = await put(client, "a/state/short", {"value": "z"}, **{"If-None-Match": "*"})
    assert (r.status_code, r.json()["expires_at"]) == (200, None)


async def test_the_listing_pages_in_key_order_with_values_on_request(
    client: httpx.AsyncClient,
) -> None:
    frozen(client)
    for key in ("c", "a", "b"):
        assert (await put(client, f"r/state/{key}", {"value": [key]})).status_code == 200
    page = (await client.get("/v1/robots/r/state", params={"limit": 2})).json()
    assert ([i["key"] for i in page["items"]], page["next"]) == (["a", "b"], "b")
    assert [i["value"] for i in page["items"]] == [None, None]
    rest = (await client.get("/v1/robots/r/state", params={"after": "b", "values": "true"})).json()
    assert (rest["items"][0]["key"], rest["items"][0]["value"], rest["next"]) == ("c", ["c"], None)


async def test_bad_input_is_refused_and_writes_nothing(client: httpx.AsyncClient) -> None:
    frozen(client)
    cases = [
        ("x/state/k", {"value": None}, 422),
        ("x/state/k", {"value": "v" * 20000}, 413),
        ("x/state/k", {"value": 1, "ttl_s": 0}, 422),
        ("x/state/k", {"value": 1, "ttl_s": 31_536_001}, 422),
        ("x/state/k", {"value": 1, "extra": True}, 422),
        ("x/state/k", {}, 422),
        ("x/state/bad key", {"value": 1}, 422),
        ("x/state/k?scope=team", {"value": 1}, 422),
    ]
    for path, body, status in cases:
        r = await put(client, path, body)
        assert (r.status_code, r.headers["content-type"]) == (status, PROBLEM), (path, body)
    assert (await client.get("/v1/robots/x/state")).status_code == 404  # not even registered


async def test_a_group_blackboard_is_read_by_members_only(client: httpx.AsyncClient) -> None:
    frozen(client)
    assert (await client.put("/v1/groups/desk", json={"members": ["m1", "m2"]})).is_success
    assert (await put(client, "outsider/state/k", {"value": 0})).status_code == 200
    r = await put(client, "m1/state/board?scope=group", {"value": {"task": "t1"}})
    assert (r.status_code, r.json()["updated_by"]) == (200, "m1")
    own = await put(client, "m1/state/board", {"value": "m1's own"})
    assert own.status_code == 200

    by_m2 = await client.get("/v1/robots/m2/state/board", params={"scope": "group"})
    assert (by_m2.status_code, by_m2.json()["value"]) == (200, {"task": "t1"})
    assert (await client.get("/v1/robots/m2/state/board")).status_code == 404  # m1's own
    assert (await client.get("/v1/robots/m1/state/board")).json()["value"] == "m1's own"
    outsider = await client.get("/v1/robots/outsider/state/board", params={"scope": "group"})
    assert (outsider.status_code, outsider.headers["content-type"]) == (404, PROBLEM)
    assert (await client.get("/v1/robots/outsider/state/board")).status_code == 404
    listed = (await client.get("/v1/robots/m2/state", params={"scope": "group"})).json()
    assert [(i["key"], i["updated_by"]) for i in listed["items"]] == [("board", "m1")]


async def test_a_put_announces_a_state_event_on_the_holders_change_stream(
    client: httpx.AsyncClient,
) -> None:
    frozen(client)
    assert (await client.put("/v1/groups/ops", json={"members": ["w"]})).is_success
    store = client.app.state.components.two_tier.store  # type: ignore[attr-defined]
    ns = client.headers["X-Namespace"]
    v1 = (await put(client, "w/state/phase?scope=group", {"value": "plan"})).json()["version"]
    assert (await client.delete("/v1/robots/w/state/phase?scope=group")).status_code == 204
    entries = await store.events_after(ns, "group:ops", "0-0", block_ms=0)
    got = [event_data(f) for _, f in entries if f["kind"] == "state"]
    assert [(e["kind"], e["key"], e["op"]) for e in got] == [
        ("state", "phase", "put"),
        ("state", "phase", "delete"),
    ]
    assert got[0]["version"] == v1 and got[1]["version"] > v1


@asynccontextmanager
async def app_on(app_factory, server: EmbeddedRedis) -> AsyncIterator[httpx.AsyncClient]:
    # No breaker pause: each request tries Redis again, so a restart is noticed at once.
    async with app_factory(redis_url=server.url, redis_retry_after_s=0) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        frozen(client)
        yield client


@pytest.fixture
async def own_db_factory(app_factory, database_factory):  # type: ignore[no-untyped-def]
    """Apps on a database of their own: another test app's repair worker must not rebuild
    these robots (and clear their stale marks) while this test's Redis is away."""
    import functools

    from app.db.migrate import upgrade

    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    return functools.partial(app_factory, database_url=url)


@pytest.mark.single_redis("FLUSHALL of its own server")
async def test_redis_losing_its_data_loses_no_acknowledged_state(
    own_db_factory, redis_server_factory
) -> None:
    server = redis_server_factory.start()
    async with app_on(own_db_factory, server) as client:
        written = {}
        for key, value in (("a", 1), ("b", {"x": [1, 2]}), ("c", "three")):
            r = await put(client, f"r/state/{key}", {"value": value, "pinned": key == "c"})
            written[key] = r.json()
        async with aioredis.from_url(server.url) as r:
            await r.flushall()
        for key, read in written.items():
            got = await client.get(f"/v1/robots/r/state/{key}")
            assert (got.status_code, got.json()) == (200, read)
            assert await redis_copy(client, "r", key) is not None  # copied back
        for key, read in written.items():  # now from the copies
            assert (await client.get(f"/v1/robots/r/state/{key}")).json() == read


@pytest.mark.single_redis("stops and restarts its own server")
async def test_a_write_redis_missed_is_never_served_from_its_old_copy(
    own_db_factory, tmp_path
) -> None:
    # Redis with its data intact after an outage (a blip, not a restart): it still holds the
    # version before the one written meanwhile, of a robot's key and of its group's.
    server = EmbeddedRedis(tmp_path / "redis", persistent=True).start()
    try:
        async with app_on(own_db_factory, server) as client:
            assert (await client.put("/v1/groups/g", json={"members": ["r", "m"]})).is_success
            old = (await put(client, "r/state/k", {"value": "old"})).json()
            old_board = (await put(client, "r/state/b?scope=group", {"value": "old"})).json()
            assert (await client.get("/v1/robots/r/state/k")).json() == old
            # m is cached with its group as it is now: not stale.
            assert (await client.get("/v1/robots/m/state/b?scope=group")).status_code == 200

            server.stop()
            match = {"If-Match": str(old["version"])}
            new = (await put(client, "r/state/k", {"value": "new"}, **match)).json()
            assert new["value"] == "new"  # acknowledged: PostgreSQL has it
            match = {"If-Match": str(old_board["version"])}
            board = (await put(client, "r/state/b?scope=group", {"value": "new"}, **match)).json()
            assert (await client.get("/v1/robots/r/state/k")).json() == new
            server.start()  # same port, same append-only file: the old copies are back
            ns = client.headers["X-Namespace"]
            assert await redis_copy(client, "r", "k") is not None
            assert await redis_copy(client, "group:g", "b") is not None

            assert (await client.get("/v1/robots/r/state/k")).json() == new
            by_m = (await client.get("/v1/robots/m/state/b?scope=group")).json()
            assert (by_m["value"], by_m["version"]) == ("new", board["version"])
            # The repair rebuilds both holders, which drops their old copies; reads refill.
            repair = client.app.state.components.repair_worker  # type: ignore[attr-defined]
            assert await repair.run_once() == 2
            assert await redis_copy(client, "r", "k") is None
            assert await redis_copy(client, "group:g", "b") is None
            assert (await client.get("/v1/robots/r/state/k")).json() == new
            copy = await redis_copy(client, "r", "k")
            assert (copy or "").startswith(f"{new['version']}:"), (ns, copy)
    finally:
        server.stop()


# --- pinned notes (item 2) ------------------------------------------------------------------


async def test_pinned_notes_are_in_every_prompt_within_its_exact_budget(
    client: httpx.AsyncClient,
) -> None:
    frozen(client)
    assert (await client.put("/v1/groups/crew", json={"members": ["p"]})).is_success
    assert (await put(client, "p/state/goal", {"value": "ship v2", "pinned": True})).is_success
    assert (await put(client, "p/state/zz", {"value": {"n": 1}, "pinned": True})).is_success
    assert (await put(client, "p/state/hidden", {"value": "not pinned"})).is_success
    board = {"value": "standup 10:30", "pinned": True}
    assert (await put(client, "p/state/rules?scope=group", board)).is_success
    r = await client.post(
        "/v1/robots/p/memories",
        json={"key": "m1", "content": "The deploy needs two approvals.", "importance": 5},
    )
    assert r.status_code == 201
    notes = ["goal: ship v2", 'zz: {"n":1}', "rules: standup 10:30"]
    body = {"input": "What now?", "recall": None, "context_window": 1000}
    got = (await client.post("/v1/robots/p/prompt", json=body)).json()
    system = "\n\n".join(["Pinned notes:", *notes, "Working memory:",
                          "The deploy needs two approvals."])  # fmt: skip
    assert got["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": "What now?"},
    ]
    assert got["tokens"] == count_chat(got["messages"])
    assert [(e["source"], e["key"], e["tokens"], e["included"]) for e in got["manifest"]] == [
        ("input", None, toks("What now?"), True),
        *[("pinned", n.split(":")[0], toks(n), True) for n in notes],
        ("working_memory", "m1", toks("The deploy needs two approvals."), True),
    ]

    # A budget that holds the notes and the input alone: working memory is dropped, the
    # notes never are; one token less and the prompt is refused.
    only = [{"role": "system", "content": "\n\n".join(["Pinned notes:", *notes])},
            {"role": "user", "content": "What now?"}]  # fmt: skip
    exact = count_chat(only)
    got = (await client.post("/v1/robots/p/prompt", json={**body, "context_window": exact})).json()
    assert (got["messages"], got["tokens"]) == (only, exact)
    assert [(e["source"], e["included"], e["reason"]) for e in got["manifest"]][-1] == (
        "working_memory", False, "budget",
    )  # fmt: skip
    r = await client.post("/v1/robots/p/prompt", json={**body, "context_window": exact - 1})
    assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM)


async def test_pinning_over_the_cap_is_refused(app_factory, ns: str) -> None:
    async with app_factory(state_pinned_max_tokens=10) as client:
        client.headers["X-Namespace"] = ns
        frozen(client)
        first = await put(client, "p/state/a", {"value": "one two three", "pinned": True})
        assert first.json()["tokens"] == toks("a: one two three") == 5
        over = await put(client, "p/state/b", {"value": "four five six seven", "pinned": True})
        assert (over.status_code, over.headers["content-type"]) == (409, PROBLEM)
        assert {k: over.json()[k] for k in ("tokens", "pinned_tokens", "limit")} == {
            "tokens": toks("b: four five six seven"), "pinned_tokens": 5, "limit": 10,
        }  # fmt: skip
        assert (await client.get("/v1/robots/p/state/b")).status_code == 404
        # Unpinned it is kept; re-pinning a key replaces its own tokens, not adds to them.
        assert (await put(client, "p/state/b", {"value": "four five six seven"})).is_success
        assert (await put(client, "p/state/a", {"value": "one two", "pinned": True})).is_success


async def test_a_holder_keeps_at_most_its_key_limit(app_factory, ns: str) -> None:
    async with app_factory(state_max_keys=2) as client:
        client.headers["X-Namespace"] = ns
        clock = frozen(client)
        assert (await put(client, "p/state/a", {"value": 1, "ttl_s": 10})).is_success
        assert (await put(client, "p/state/b", {"value": 2})).is_success
        third = await put(client, "p/state/c", {"value": 3})
        assert (third.status_code, third.headers["content-type"]) == (409, PROBLEM)
        assert (await put(client, "p/state/b", {"value": 4})).is_success  # a held key
        clock.t = T0 + timedelta(seconds=10)  # `a` expired: its place is free
        assert (await put(client, "p/state/c", {"value": 3})).is_success
        listed = (await client.get("/v1/robots/p/state")).json()
        assert [i["key"] for i in listed["items"]] == ["b", "c"]
