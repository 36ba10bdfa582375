"""Sessions over HTTP (issue 19, item 1): append, the window by n and by max_tokens, expiry and
refresh with a frozen clock, consolidation (expiry worker and DELETE) into long-term memory,
the Redis hot window and its fallback — real PostgreSQL and real Redis."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import tiktoken
from sqlalchemy import text

from app.embedded import free_port
from app.sessions.hot import session_key

PROBLEM = "application/problem+json"
ENC = tiktoken.get_encoding("cl100k_base")
# Far after any other test's frozen clock: workers of other tests' apps (at their own times)
# never find these sessions due; only this module's clocks reach their expiry.
T0 = datetime(2201, 3, 4, 10, 0, tzinfo=UTC)
HOUR = 3600


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def at(self, seconds: float) -> datetime:
        self.t = T0 + timedelta(seconds=seconds)
        return self.t


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def toks(s: str) -> int:
    return len(ENC.encode(s))


@pytest.fixture
async def client(app_factory: Any) -> AsyncIterator[httpx.AsyncClient]:
    # The expiry worker's own passes never run here: tests call run_once at chosen times.
    async with app_factory(session_expiry_interval_s=3600) as c:
        c.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        yield c


@pytest.fixture
def clock(client: httpx.AsyncClient) -> Clock:
    c = Clock()
    client.app.state.components.clock.set(c)  # type: ignore[attr-defined]
    return c


def components(client: httpx.AsyncClient) -> Any:
    return client.app.state.components  # type: ignore[attr-defined]


async def expire_pass(client: httpx.AsyncClient) -> None:
    await components(client).session_worker.run_once()


async def sql(client: httpx.AsyncClient, statement: str) -> list[Any]:
    async with components(client).sessionmaker() as s:
        rows = list(await s.execute(text(statement), {"ns": client.headers["X-Namespace"]}))
        await s.commit()
        return rows


async def session_rows(client: httpx.AsyncClient) -> list[Any]:
    return await sql(
        client,
        "SELECT s.id, s.name, s.ttl_s, s.expires_at, s.ended_at, "
        "(SELECT count(*) FROM session_message m WHERE m.session_id = s.id) AS messages "
        "FROM session s JOIN namespace n ON n.id = s.namespace_id WHERE n.name = :ns "
        "ORDER BY s.id",
    )


async def memories(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await client.get("/v1/robots/alice/memories", params={"limit": 200})
    assert r.status_code == 200
    return sorted(r.json()["items"], key=lambda m: m["key"])


async def append(client: httpx.AsyncClient, session: str, *messages: dict[str, Any]) -> Any:
    r = await client.post(
        f"/v1/robots/alice/sessions/{session}/messages", json={"messages": list(messages)}
    )
    assert r.status_code == 201, r.text
    return r.json()


async def window(client: httpx.AsyncClient, session: str, **params: int) -> Any:
    return await client.get(f"/v1/robots/alice/sessions/{session}/messages", params=params)


def user(content: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


# --- append and the window -------------------------------------------------------------------


async def test_append_returns_numbered_token_counted_messages_and_the_expiry(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    body = await append(
        client,
        "chat-1",
        {"role": "system", "content": "You are terse."},
        user("My flight to Lisbon leaves Friday at 7:40.", metadata={"lang": "en"}),
    )
    assert body["robot"] == "alice" and body["session"] == "chat-1"
    assert body["expires_at"] == iso(T0 + timedelta(seconds=HOUR))
    assert body["degraded"] is False
    assert body["messages"] == [
        {"seq": 1, "role": "system", "content": "You are terse.", "metadata": {},
         "remember": False, "tokens": 4, "access_count": 0, "created_at": iso(T0)},
        {"seq": 2, "role": "user", "content": "My flight to Lisbon leaves Friday at 7:40.",
         "metadata": {"lang": "en"}, "remember": False, "tokens": 12, "access_count": 0,
         "created_at": iso(T0)},
    ]  # fmt: skip
    assert [toks("You are terse."), toks("My flight to Lisbon leaves Friday at 7:40.")] == [4, 12]
    clock.at(5)
    more = await append(client, "chat-1", {"role": "assistant", "content": "Noted."})
    assert [(m["seq"], m["created_at"]) for m in more["messages"]] == [(3, iso(clock.t))]
    [row] = await session_rows(client)
    assert (row.name, row.ttl_s, row.messages, row.ended_at) == ("chat-1", HOUR, 3, None)


async def test_window_is_the_last_n_or_what_fits_max_tokens_oldest_first(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    contents = ["one", "two apples here", "three little birds sang", "four", "five fine days"]
    for i, c in enumerate(contents):
        clock.at(i)
        await append(client, "w", user(c))
    counts = [toks(c) for c in contents]
    assert counts == [1, 3, 4, 1, 3]

    r = await window(client, "w")
    body = r.json()
    assert [m["content"] for m in body["messages"]] == contents
    assert [m["tokens"] for m in body["messages"]] == counts
    assert [m["created_at"] for m in body["messages"]] == [
        iso(T0 + timedelta(seconds=i)) for i in range(5)
    ]
    assert (body["tokens"], body["total_messages"], body["degraded"]) == (12, 5, False)

    body = (await window(client, "w", n=2)).json()
    assert [m["seq"] for m in body["messages"]] == [4, 5]
    assert body["tokens"] == 4
    # 3 + 1 + 4 = 8 fits 8; the next (3) would make 11.
    body = (await window(client, "w", max_tokens=8)).json()
    assert ([m["seq"] for m in body["messages"]], body["tokens"]) == ([3, 4, 5], 8)
    body = (await window(client, "w", max_tokens=7)).json()
    assert ([m["seq"] for m in body["messages"]], body["tokens"]) == ([4, 5], 4)
    body = (await window(client, "w", max_tokens=2)).json()
    assert (body["messages"], body["tokens"]) == ([], 0)
    body = (await window(client, "w", n=1, max_tokens=100)).json()
    assert [m["seq"] for m in body["messages"]] == [5]
    # Reads counted per message: 5 was returned by every read but the empty one.
    body = (await window(client, "w")).json()
    assert [m["access_count"] for m in body["messages"]] == [2, 2, 3, 5, 6]


async def test_a_window_deeper_than_the_hot_copy_is_read_from_postgres(
    app_factory: Any, redis: Any
) -> None:
    async with app_factory(session_expiry_interval_s=3600, session_hot_messages=3) as client:
        ns = f"t-{uuid.uuid4().hex[:12]}"
        client.headers["X-Namespace"] = ns
        for i in range(5):
            await append(client, "deep", user(f"m{i}"))
        [row] = await session_rows(client)
        key = session_key(ns, "alice", row.id)
        assert sorted(await redis.hkeys(key)) == ["3", "4", "5"]
        body = (await window(client, "deep", n=5)).json()
        assert [m["content"] for m in body["messages"]] == [f"m{i}" for i in range(5)]
        assert body["degraded"] is False
        body = (await window(client, "deep", n=3)).json()
        assert [m["content"] for m in body["messages"]] == ["m2", "m3", "m4"]


async def test_a_lost_hot_window_is_rebuilt_from_postgres(
    client: httpx.AsyncClient, clock: Clock, redis: Any
) -> None:
    await append(client, "lost", user("alpha"), user("beta"))
    [row] = await session_rows(client)
    key = session_key(client.headers["X-Namespace"], "alice", row.id)
    assert sorted(await redis.hkeys(key)) == ["1", "2"]
    await redis.delete(key)  # Redis lost the data
    await append(client, "lost", user("gamma"))  # the copy now misses 1 and 2
    body = (await window(client, "lost")).json()
    assert [m["content"] for m in body["messages"]] == ["alpha", "beta", "gamma"]
    assert body["degraded"] is False
    assert sorted(await redis.hkeys(key)) == ["1", "2", "3"]


async def test_redis_down_the_append_is_acknowledged_and_the_window_read_from_postgres(
    app_factory: Any,
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with app_factory(redis_url=dead, session_expiry_interval_s=3600) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        r = await client.post(
            "/v1/robots/alice/sessions/down/messages", json={"messages": [user("still here")]}
        )
        assert r.status_code == 201
        assert (r.json()["degraded"], r.json()["messages"][0]["seq"]) == (True, 1)
        body = (await window(client, "down")).json()
        assert [m["content"] for m in body["messages"]] == ["still here"]
        assert (body["degraded"], body["messages"][0]["access_count"]) == (True, 1)
        [row] = await session_rows(client)
        assert row.messages == 1


# --- expiry, refresh, consolidation ---------------------------------------------------------


async def test_expiry_promotes_exactly_the_remembered_and_the_often_read_messages(
    client: httpx.AsyncClient, clock: Clock, redis: Any
) -> None:
    await append(
        client,
        "trip",
        user("Book me a window seat.", remember=True, metadata={"source": "app"}),
        {"role": "assistant", "content": "Which date?"},
        user("The 14th."),
    )
    [row] = await session_rows(client)
    clock.at(10)
    for _ in range(3):
        assert [m["seq"] for m in (await window(client, "trip", n=1)).json()["messages"]] == [3]
    clock.at(20)
    await window(client, "trip", n=2)  # 2: one access; 3: four
    assert (await session_rows(client))[0].expires_at == T0 + timedelta(seconds=20 + HOUR)

    clock.at(20 + HOUR - 1)
    await expire_pass(client)
    assert [r.id for r in await session_rows(client)] == [row.id]  # not due yet
    assert await memories(client) == []

    clock.at(20 + HOUR)
    assert (await window(client, "trip")).status_code == 404  # expired, not yet consolidated
    await expire_pass(client)
    assert await session_rows(client) == []
    assert await redis.exists(session_key(client.headers["X-Namespace"], "alice", row.id)) == 0
    found = await memories(client)
    assert [
        (m["key"], m["content"], m["type"], m["metadata"], m["created_at"], m["author"])
        for m in found
    ] == [
        (f"session:{row.id}:1", "Book me a window seat.", "conversation",
         {"source": "app", "session": "trip", "role": "user", "seq": 1}, iso(T0), "alice"),
        (f"session:{row.id}:3", "The 14th.", "conversation",
         {"session": "trip", "role": "user", "seq": 3}, iso(T0), "alice"),
    ]  # fmt: skip
    # Through the add path: placed in working memory too.
    wm = (await client.get("/v1/robots/alice/working-memory")).json()
    assert sorted(i["key"] for i in wm["items"]) == [f"session:{row.id}:1", f"session:{row.id}:3"]


async def test_every_access_pushes_the_expiry_out(client: httpx.AsyncClient, clock: Clock) -> None:
    await append(client, "keep", user("hello"))
    clock.at(3000)
    assert (await window(client, "keep")).status_code == 200  # now expires at 3000 + 1 h
    clock.at(HOUR + 1)
    assert (await window(client, "keep")).status_code == 200  # 3601 + 1 h
    clock.at(HOUR + 100)
    await append(client, "keep", user("again"))  # 3700 + 1 h
    clock.at(3700 + HOUR - 1)
    await expire_pass(client)
    [row] = await session_rows(client)
    assert (row.expires_at, row.ended_at, row.messages) == (
        T0 + timedelta(seconds=3700 + HOUR),
        None,
        2,
    )
    clock.at(3700 + HOUR)
    await expire_pass(client)
    assert await session_rows(client) == []
    assert await memories(client) == []  # none remembered or read 3 times


async def test_a_robots_session_ttl_applies_to_its_new_sessions(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    r = await client.put("/v1/robots/alice", json={"session_ttl_s": 60})
    assert (r.status_code, r.json()["session_ttl_s"]) == (200, 60)
    body = await append(client, "short", user("hi"))
    assert body["expires_at"] == iso(T0 + timedelta(seconds=60))
    clock.at(60)
    assert (await window(client, "short")).status_code == 404
    # An append to an expired session ends it and starts a new one.
    again = await append(client, "short", user("back"))
    assert again["messages"][0]["seq"] == 1
    rows = await session_rows(client)
    assert [(r.messages, r.ended_at) for r in rows] == [(1, T0 + timedelta(seconds=60)), (1, None)]
    await expire_pass(client)
    assert [r.messages for r in await session_rows(client)] == [1]


async def test_delete_ends_and_consolidates_at_once(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    await append(client, "d", user("keep this", remember=True), user("drop this"))
    [row] = await session_rows(client)
    clock.at(30)
    r = await client.delete("/v1/robots/alice/sessions/d/messages")
    assert r.status_code == 200
    assert r.json() == {
        "robot": "alice", "session": "d", "promoted": [f"session:{row.id}:1"], "discarded": 1
    }  # fmt: skip
    assert await session_rows(client) == []
    assert [(m["key"], m["content"]) for m in await memories(client)] == [
        (f"session:{row.id}:1", "keep this")
    ]
    assert (await window(client, "d")).status_code == 404
    assert (await client.delete("/v1/robots/alice/sessions/d/messages")).status_code == 404
    # The name starts a new session, whose keys cannot collide with the old one's.
    await append(client, "d", user("new", remember=True))
    [new] = await session_rows(client)
    assert new.id != row.id
    r = await client.delete("/v1/robots/alice/sessions/d/messages")
    assert r.json()["promoted"] == [f"session:{new.id}:1"]


async def test_consolidation_finishes_a_crashed_one_and_counts_taken_keys_as_promoted(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    await append(client, "crash", user("first", remember=True), user("second", remember=True))
    [row] = await session_rows(client)
    # A crash after promoting message 1, before the session was deleted: its memory exists,
    # and the session is marked ended.
    r = await client.post(
        "/v1/robots/alice/memories", json={"key": f"session:{row.id}:1", "content": "first"}
    )
    assert r.status_code == 201
    await sql(
        client,
        f"UPDATE session SET ended_at = '{iso(T0)}', claimed_at = '{iso(T0)}' WHERE id = {row.id}",
    )
    clock.at(59)
    await expire_pass(client)  # still within the crashed consolidation's lease
    assert len(await session_rows(client)) == 1
    clock.at(60)
    await expire_pass(client)
    assert await session_rows(client) == []
    assert [(m["key"], m["content"]) for m in await memories(client)] == [
        (f"session:{row.id}:1", "first"),
        (f"session:{row.id}:2", "second"),
    ]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("s", {"messages": [{"role": "user", "content": ""}]}, "body.messages.0.content"),
        ("s", {"messages": [{"role": "robot", "content": "x"}]}, "body.messages.0.role"),
        ("s", {"messages": []}, "body.messages"),
        ("s", {"messages": [{"role": "user", "content": "x", "extra": 1}]},
         "body.messages.0.extra"),
        ("s", {"messages": [{"role": "user", "content": "x", "remember": "yes"}]},
         "body.messages.0.remember"),
        ("s" * 65, {"messages": [{"role": "user", "content": "x"}]}, "path.session"),
    ],
)  # fmt: skip
async def test_bad_appends_are_422_problem_json_and_write_nothing(
    client: httpx.AsyncClient, path: str, body: Any, field: str
) -> None:
    r = await client.post(f"/v1/robots/alice/sessions/{path}/messages", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    assert field in [e["field"] for e in r.json()["errors"]]
    assert await session_rows(client) == []
    assert (await client.get("/v1/robots")).json() == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": 0}, "query.n"),
        ({"n": 1001}, "query.n"),
        ({"max_tokens": 0}, "query.max_tokens"),
        ({"max_tokens": 10_000_001}, "query.max_tokens"),
    ],
)
async def test_bad_window_parameters_are_422_and_change_nothing(
    client: httpx.AsyncClient, clock: Clock, params: dict[str, int], field: str
) -> None:
    await append(client, "s", user("x"))
    clock.at(100)
    r = await window(client, "s", **params)
    assert r.status_code == 422
    assert r.headers["content-type"] == PROBLEM
    assert [e["field"] for e in r.json()["errors"]] == [field]
    [row] = await session_rows(client)
    assert row.expires_at == T0 + timedelta(seconds=HOUR)  # not refreshed
    body = (await window(client, "s")).json()
    assert body["messages"][0]["access_count"] == 1  # only this read counted


async def test_metadata_over_the_limit_as_promoted_is_422(app_factory: Any) -> None:
    async with app_factory(session_expiry_interval_s=3600, max_metadata_bytes=40) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        # 2 bytes alone, but over 40 with session, role and seq added.
        r = await client.post(
            "/v1/robots/alice/sessions/s/messages",
            json={"messages": [user("x"), user("y", metadata={"k": "v"})]},
        )
        assert r.status_code == 422
        assert [e["field"] for e in r.json()["errors"]] == [
            "body.messages.0.metadata",
            "body.messages.1.metadata",
        ]
        assert await session_rows(client) == []


async def test_too_many_messages_is_413_naming_messages(app_factory: Any) -> None:
    async with app_factory(max_batch_size=3) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        r = await client.post(
            "/v1/robots/alice/sessions/s/messages", json={"messages": [user("x")] * 4}
        )
        assert (r.status_code, r.headers["content-type"]) == (413, PROBLEM)
        problem = r.json()
        assert (problem["detail"], problem["field"], problem["limit"]) == (
            "a request holds at most 3 messages; got 4", "messages", 3,
        )  # fmt: skip
        assert await session_rows(client) == []


async def test_unknown_session_or_robot_is_404(client: httpx.AsyncClient) -> None:
    assert (await window(client, "nope")).status_code == 404
    await append(client, "yes", user("x"))
    assert (await window(client, "nope")).status_code == 404
    r = await client.get("/v1/robots/bob/sessions/yes/messages")
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)
