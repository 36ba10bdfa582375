"""Working memory over HTTP (issue 4): add and recall place memories, retrieve touches,
context assembles, DELETE clears, forget reaches every robot — real Postgres and real Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import tiktoken
from sqlalchemy import event, text

from app.working_memory.schemas import ContextRead

PROBLEM = "application/problem+json"
T0 = datetime(2031, 5, 6, 8, 0, tzinfo=UTC)
ENC = tiktoken.get_encoding("cl100k_base")


class Clock:
    """A frozen service clock the test moves by hand."""

    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def at(self, **delta: float) -> Clock:
        self.t = T0 + timedelta(**delta)
        return self


def text_of(tokens: int, word: str) -> str:
    """`word` followed by " apple"s: exactly `tokens` cl100k_base tokens."""
    content = word + " apple" * (tokens - len(ENC.encode(word)))
    assert len(ENC.encode(content)) == tokens
    return content


@pytest.fixture
def clock(client: httpx.AsyncClient) -> Clock:
    c = Clock(T0)
    client.app.state.components.clock.set(c)
    return c


async def set_budget(client, robot: str, budget: int) -> None:
    r = await client.put(f"/v1/robots/{robot}", json={"working_memory_budget": budget})
    assert r.status_code == 200, r.text
    assert r.json()["working_memory_budget"] == budget


async def add(client, robot: str, key: str, tokens: int, importance: float, word: str = "note"):
    r = await client.post(
        f"/v1/robots/{robot}/memories",
        json={"key": key, "content": text_of(tokens, word), "importance": importance},
    )
    assert r.status_code == 201, r.text
    assert r.json()["token_count"] == tokens
    return r.json()["working_memory"]


async def working_set(client, robot: str) -> tuple[list[tuple[str, int, float, bool]], int]:
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["degraded"] is False
    assert body["tokens"] == sum(i["tokens"] for i in body["items"])
    items = [(i["key"], i["tokens"], i["importance"], i["from_recall"]) for i in body["items"]]
    return items, body["tokens"]


async def recall(client, robot: str, query: str, limit: int = 10) -> dict:
    r = await client.post(
        f"/v1/robots/{robot}/recall", json={"query": query, "strategy": "fulltext", "limit": limit}
    )
    assert r.status_code == 200, r.text
    return r.json()


async def sql(client, query: str, **params) -> list:
    async with client.app.state.components.sessionmaker() as s:
        return list(await s.execute(text(query), params))


async def members_in_postgres(client, ns: str, robot: str) -> set[str]:
    rows = await sql(
        client,
        """SELECT k.key FROM working_memory_item w
           JOIN robot r ON r.id = w.robot_id JOIN namespace n ON n.id = r.namespace_id
           JOIN memory_key k ON k.memory_id = w.memory_id
           WHERE n.name = :ns AND r.name = :robot AND w.in_working_memory""",
        ns=ns,
        robot=robot,
    )
    return {r.key for r in rows}


async def event_counts(client, ns: str) -> dict[str, int]:
    rows = await sql(
        client,
        """SELECT e.kind, count(*) FROM memory_event e JOIN namespace n ON n.id = e.namespace_id
           WHERE n.name = :ns GROUP BY e.kind""",
        ns=ns,
    )
    return {kind: n for kind, n in rows}


async def context(client, robot: str, **params) -> dict:
    r = await client.get(f"/v1/robots/{robot}/context", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == sum(i["tokens"] for i in body["items"])
    assert body["tokens"] <= body["max_tokens"]
    return body


# --- 1. add ------------------------------------------------------------------------------------


async def test_add_evicts_lowest_importance_then_oldest(client, clock, ns) -> None:
    await set_budget(client, "a", 30)
    # Keys run against the alphabet (z-old before y-mid), so only age can break the tie.
    assert await add(client, "a", "w-5", 10, 5) == {
        "admitted": True,
        "reason": "admitted",
        "evicted": [],
    }
    clock.at(minutes=1)
    assert (await add(client, "a", "z-old", 10, 1))["evicted"] == []
    clock.at(minutes=2)
    assert (await add(client, "a", "y-mid", 8, 1))["evicted"] == []
    assert await working_set(client, "a") == (
        [("z-old", 10, 1.0, False), ("y-mid", 8, 1.0, False), ("w-5", 10, 5.0, False)],
        28,
    )
    clock.at(minutes=3)
    assert await add(client, "a", "x-3", 10, 3) == {
        "admitted": True,
        "reason": "admitted",
        "evicted": ["z-old"],
    }
    clock.at(minutes=4)
    # 22 + 12 > 30: y-mid goes, then still 32 > 30, so x-3 (importance 3) goes too.
    assert await add(client, "a", "a-new", 12, 1) == {
        "admitted": True,
        "reason": "admitted",
        "evicted": ["y-mid", "x-3"],
    }
    assert await working_set(client, "a") == (
        [("a-new", 12, 1.0, False), ("w-5", 10, 5.0, False)],
        22,
    )
    assert await members_in_postgres(client, ns, "a") == {"a-new", "w-5"}
    # Eviction only leaves working memory: every memory is still in long-term memory.
    for key in ("w-5", "z-old", "y-mid", "x-3", "a-new"):
        assert (await client.get(f"/v1/robots/a/memories/{key}")).status_code == 200


async def test_memory_over_the_whole_budget_is_stored_but_not_admitted(client, clock) -> None:
    await set_budget(client, "a", 30)
    await add(client, "a", "small", 10, 1)
    assert await add(client, "a", "huge", 31, 9, word="walrus") == {
        "admitted": False,
        "reason": "too_large",
        "evicted": [],
    }
    assert await working_set(client, "a") == ([("small", 10, 1.0, False)], 10)

    r = await client.get("/v1/robots/a/memories/huge")
    assert r.status_code == 200
    assert r.json()["token_count"] == 31
    found = await recall(client, "a", "walrus")
    assert [h["key"] for h in found["hits"]] == ["huge"]
    assert found["working_memory"] == {
        "loaded": [],
        "evicted": [],
        "not_admitted": ["huge"],
        "pending": [],
        "reason": "loaded",
    }
    assert await working_set(client, "a") == ([("small", 10, 1.0, False)], 10)


async def test_budget_defaults_to_settings_and_put_changes_it(app_factory, ns) -> None:
    async with app_factory(working_memory_budget=25) as client:
        client.headers["X-Namespace"] = ns
        await add(client, "a", "one", 20, 1)
        assert await add(client, "a", "two", 20, 1) == {
            "admitted": True,
            "reason": "admitted",
            "evicted": ["one"],
        }
        r = await client.get("/v1/robots/a/working-memory")
        assert (r.json()["max_tokens"], r.json()["utilization"]) == (25, 80.0)
        await set_budget(client, "a", 45)
        assert (await add(client, "a", "three", 20, 1))["evicted"] == []
        assert await working_set(client, "a") == (
            [("two", 20, 1.0, False), ("three", 20, 1.0, False)],
            40,
        )


# --- 2. recall -----------------------------------------------------------------------------


async def test_recall_loads_hits_into_the_callers_working_memory(client, clock, ns) -> None:
    await set_budget(client, "reader", 20)
    await add(client, "reader", "own", 8, 1)
    clock.at(minutes=1)
    await add(client, "author", "h-2", 6, 2, word="walrus")
    await add(client, "author", "h-3", 7, 3, word="walrus")
    await add(client, "author", "other", 5, 9, word="zebra")

    clock.at(minutes=2)
    found = await recall(client, "reader", "walrus")
    hits = [h["key"] for h in found["hits"]]
    assert sorted(hits) == ["h-2", "h-3"]
    # 8 + 6 + 7 = 21 > 20: the reader's own importance-1 memory makes room.
    assert found["working_memory"] == {
        "loaded": hits,
        "evicted": ["own"],
        "not_admitted": [],
        "pending": [],
        "reason": "loaded",
    }
    assert await working_set(client, "reader") == (
        [("h-2", 6, 2.0, True), ("h-3", 7, 3.0, True)],
        13,
    )
    assert await members_in_postgres(client, ns, "reader") == {"h-2", "h-3"}
    # The author's working memory is its own and unchanged by the reader's recall.
    assert (await working_set(client, "author"))[0] == [
        ("h-2", 6, 2.0, False),
        ("h-3", 7, 3.0, False),
        ("other", 5, 9.0, False),
    ]


async def test_recall_reports_every_eviction_even_when_the_first_hit_is_too_large(
    client, clock
) -> None:
    await set_budget(client, "reader", 20)
    await add(client, "reader", "own", 15, 1)
    clock.at(minutes=1)
    # The big hit ranks first (it says "walrus" twice); it cannot fit, the small one can.
    await add(client, "author", "big", 25, 5, word="walrus walrus")
    await add(client, "author", "small", 10, 5, word="walrus")
    found = await recall(client, "reader", "walrus")
    assert [h["key"] for h in found["hits"]] == ["big", "small"]
    assert found["working_memory"] == {
        "loaded": ["small"],
        "evicted": ["own"],
        "not_admitted": ["big"],
        "pending": [],
        "reason": "loaded",
    }


# --- 3. retrieve touches ---------------------------------------------------------------------


async def test_retrieve_moves_a_memory_to_the_front_of_recent_context(client, clock) -> None:
    for minute, key in enumerate(["first", "second", "third"]):
        clock.at(minutes=minute)
        await add(client, "a", key, 5, 1)
    assert [i["key"] for i in (await context(client, "a", strategy="recent"))["items"]] == [
        "third",
        "second",
        "first",
    ]
    clock.at(minutes=10)
    assert (await client.get("/v1/robots/a/memories/first")).status_code == 200
    body = await context(client, "a", strategy="recent")
    assert [i["key"] for i in body["items"]] == ["first", "third", "second"]
    touched_ms = (T0 + timedelta(minutes=10)).timestamp() * 1000
    assert body["items"][0]["score"] == touched_ms
    # Another robot reading it does not hold it, so nothing of a's changes.
    clock.at(minutes=11)
    assert (await client.get("/v1/robots/b/memories/second")).status_code == 200
    body = await context(client, "a", strategy="recent")
    assert [i["key"] for i in body["items"]] == ["first", "third", "second"]
    wm = (await client.get("/v1/robots/a/working-memory")).json()["items"]
    assert {i["key"]: i["last_access_at"] for i in wm}["first"] == "2031-05-06T08:10:00Z"


# --- 4. context ----------------------------------------------------------------------------


@pytest.fixture
async def four(client, clock) -> None:
    """old (8, 10 tokens) at T0, mid (3, 5) at +1h, low (1, 7) at +3h, fresh (2, 4) at +4h;
    then the clock stops at +5h."""
    for hours, key, tokens, importance in [
        (0, "old", 10, 8),
        (1, "mid", 5, 3),
        (3, "low", 7, 1),
        (4, "fresh", 4, 2),
    ]:
        clock.at(hours=hours)
        await add(client, "a", key, tokens, importance, word=key)
    clock.at(hours=5)


async def test_context_orders_by_each_strategy(client, four) -> None:
    balanced = await context(client, "a", strategy="balanced")
    # importance / (1 + hours since added): 8/6, 2/2, 3/5, 1/3
    assert [(i["key"], i["score"]) for i in balanced["items"]] == [
        ("old", 8 / 6),
        ("fresh", 1.0),
        ("mid", 0.6),
        ("low", 1 / 3),
    ]
    assert (balanced["tokens"], balanced["strategy"]) == (26, "balanced")
    assert balanced["text"] == "\n\n".join(
        text_of(n, k) for k, n in [("old", 10), ("fresh", 4), ("mid", 5), ("low", 7)]
    )
    important = await context(client, "a", strategy="important")
    assert [(i["key"], i["score"]) for i in important["items"]] == [
        ("old", 8.0),
        ("mid", 3.0),
        ("fresh", 2.0),
        ("low", 1.0),
    ]
    recent = await context(client, "a", strategy="recent")
    assert [i["key"] for i in recent["items"]] == ["fresh", "low", "mid", "old"]
    # No strategy given: balanced.
    default = await context(client, "a")
    assert (default["strategy"], default["items"]) == ("balanced", balanced["items"])


@pytest.mark.parametrize(
    ("strategy", "max_tokens", "keys", "tokens"),
    [
        ("balanced", 14, ["old", "fresh"], 14),
        ("balanced", 13, ["old"], 10),  # fresh would make 14; the cut keeps a prefix
        ("balanced", 9, [], 0),
        ("important", 15, ["old", "mid"], 15),
        ("important", 18, ["old", "mid"], 15),
        ("recent", 11, ["fresh", "low"], 11),
        ("recent", 26, ["fresh", "low", "mid", "old"], 26),
    ],
)
async def test_context_stops_before_max_tokens(
    client, four, strategy, max_tokens, keys, tokens
) -> None:
    body = await context(client, "a", strategy=strategy, max_tokens=max_tokens)
    assert [i["key"] for i in body["items"]] == keys
    assert (body["tokens"], body["max_tokens"]) == (tokens, max_tokens)


async def test_context_body_is_exactly_what_the_response_model_would_write(client, four) -> None:
    # The route writes its body with orjson rather than through FastAPI's response model:
    # the bytes must still be ContextRead's, floats included (8.0, not 8).
    for strategy in ("recent", "important", "balanced"):
        r = await client.get("/v1/robots/a/context", params={"strategy": strategy})
        assert (r.status_code, r.headers["content-type"]) == (200, "application/json")
        assert ContextRead.model_validate_json(r.content).model_dump_json() == r.text
        assert all(
            type(i["importance"]) is float and type(i["score"]) is float for i in r.json()["items"]
        )


async def test_context_of_a_cached_robot_checks_out_no_database_connection(client, four) -> None:
    res = client.app.state.components
    first = await context(client, "a")  # the robot is in the per-process cache from here on
    checkouts: list[object] = []

    def on_checkout(dbapi_connection, record, proxy):  # type: ignore[no-untyped-def]
        checkouts.append(dbapi_connection)

    event.listen(res.engine.sync_engine, "checkout", on_checkout)
    try:
        assert await context(client, "a") == first
    finally:
        event.remove(res.engine.sync_engine, "checkout", on_checkout)
    assert checkouts == []


async def test_context_rejects_unknown_robot_and_bad_parameters(client, four) -> None:
    r = await client.get("/v1/robots/nobody/context")
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)
    for params in ({"max_tokens": 0}, {"max_tokens": -1}, {"strategy": "random"}):
        r = await client.get("/v1/robots/a/context", params=params)
        assert (r.status_code, r.headers["content-type"]) == (422, PROBLEM), params
    r = await client.get("/v1/robots/nobody/working-memory")
    assert (r.status_code, r.headers["content-type"]) == (404, PROBLEM)


# --- 5. membership, events, forget -------------------------------------------------------------


async def test_postgres_membership_and_events_follow_every_change(client, clock, ns) -> None:
    await set_budget(client, "a", 20)
    await add(client, "a", "m1", 8, 1, word="walrus")
    clock.at(minutes=1)
    await add(client, "a", "m2", 8, 2)
    clock.at(minutes=2)
    assert (await add(client, "a", "m3", 8, 3, word="walrus"))["evicted"] == ["m1"]
    assert await members_in_postgres(client, ns, "a") == {"m2", "m3"}

    clock.at(minutes=3)
    found = await recall(client, "a", "walrus")  # m1 back (evicting m2), m3 re-placed
    assert sorted(found["working_memory"]["loaded"]) == ["m1", "m3"]
    assert found["working_memory"]["evicted"] == ["m2"]
    assert await members_in_postgres(client, ns, "a") == {"m1", "m3"}
    keys, _ = await working_set(client, "a")
    assert {k for k, *_ in keys} == {"m1", "m3"}

    assert (await client.get("/v1/robots/a/memories/m2")).status_code == 200
    assert (await client.delete("/v1/robots/a/memories/m3")).status_code == 200
    assert await members_in_postgres(client, ns, "a") == {"m1"}
    assert await working_set(client, "a") == ([("m1", 8, 1.0, True)], 8)
    assert await event_counts(client, ns) == {
        "add": 3,
        "evict": 2,
        "recall": 2,
        "access": 1,
        "forget": 1,
    }


async def test_forget_removes_a_memory_from_every_robot_holding_it(client, clock, ns) -> None:
    await add(client, "author", "shared", 6, 4, word="walrus")
    await add(client, "author", "kept", 6, 1, word="zebra")
    for robot in ("r1", "r2"):
        assert (await recall(client, robot, "walrus"))["working_memory"]["loaded"] == ["shared"]
        assert await members_in_postgres(client, ns, robot) == {"shared"}

    r = await client.delete("/v1/robots/r1/memories/shared")
    assert r.status_code == 200
    assert r.json()["deleted_at"] is not None
    for robot in ("author", "r1", "r2"):
        keys, _ = await working_set(client, robot)
        assert "shared" not in {k for k, *_ in keys}, robot
        assert "shared" not in await members_in_postgres(client, ns, robot)
    assert (await working_set(client, "author")) == ([("kept", 6, 1.0, False)], 6)
    assert (await working_set(client, "r2")) == ([], 0)
    assert (await context(client, "r2"))["items"] == []


# --- 6. clear ------------------------------------------------------------------------------


async def test_delete_working_memory_clears_it_and_keeps_long_term(client, clock, ns) -> None:
    await add(client, "a", "one", 5, 1)
    await add(client, "a", "two", 6, 2)
    r = await client.delete("/v1/robots/a/working-memory")
    assert r.status_code == 200
    assert r.json() == {"robot": "a", "removed": 2}
    assert await working_set(client, "a") == ([], 0)
    assert await members_in_postgres(client, ns, "a") == set()
    assert (await context(client, "a"))["items"] == []
    for key in ("one", "two"):
        r = await client.get(f"/v1/robots/a/memories/{key}")
        assert (r.status_code, r.json()["deleted_at"]) == (200, None)
    # Clearing changes no memory, so nothing is logged as evicted or forgotten.
    assert await event_counts(client, ns) == {"add": 2, "access": 2}
    # And the robot keeps working: the next add lands in an empty working memory.
    assert (await add(client, "a", "three", 4, 1))["evicted"] == []
    assert await working_set(client, "a") == ([("three", 4, 1.0, False)], 4)


async def test_a_batch_reports_members_pushed_out_by_later_ones(client, clock, ns) -> None:
    await set_budget(client, "a", 20)
    r = await client.post(
        "/v1/robots/a/memories/batch",
        json={
            "memories": [
                {"key": "b1", "content": text_of(8, "note"), "importance": 1},
                {"key": "b2", "content": text_of(8, "note"), "importance": 4},
                {"key": "b3", "content": text_of(8, "note"), "importance": 2},
            ]
        },
    )
    assert r.status_code == 201
    assert {m["key"]: m["working_memory"] for m in r.json()["memories"]} == {
        "b1": {"admitted": False, "reason": "evicted", "evicted": ["b1"]},
        "b2": {"admitted": True, "reason": "admitted", "evicted": ["b1"]},
        "b3": {"admitted": True, "reason": "admitted", "evicted": ["b1"]},
    }
    assert await working_set(client, "a") == ([("b3", 8, 2.0, False), ("b2", 8, 4.0, False)], 16)
    assert await members_in_postgres(client, ns, "a") == {"b2", "b3"}
    assert await event_counts(client, ns) == {"add": 3, "evict": 1}


async def test_upsert_replaces_the_memory_in_every_working_memory(client, clock, ns) -> None:
    await add(client, "author", "doc", 5, 1, word="walrus")
    await add(client, "author", "other", 5, 1)
    assert (await recall(client, "reader", "walrus"))["working_memory"]["loaded"] == ["doc"]
    clock.at(minutes=5)
    r = await client.put(
        "/v1/robots/author/memories/doc", json={"content": text_of(9, "walrus"), "importance": 6}
    )
    assert r.status_code == 200
    assert r.json()["working_memory"] == {"admitted": True, "reason": "admitted", "evicted": []}
    # The reader's stale copy is gone; the writer holds the new version, placed anew.
    assert await working_set(client, "reader") == ([], 0)
    assert await working_set(client, "author") == (
        [("other", 5, 1.0, False), ("doc", 9, 6.0, False)],
        14,
    )
    assert await members_in_postgres(client, ns, "reader") == set()
    assert await members_in_postgres(client, ns, "author") == {"doc", "other"}


async def test_rebuild_under_a_shrunk_budget_evicts_by_policy_and_postgres_follows(
    client, clock, ns, redis_url
) -> None:
    from app.working_memory.store import robot_keys
    from tests.cluster import connect

    await set_budget(client, "a", 30)
    for minute, (key, importance) in enumerate([("first", 5), ("second", 2), ("third", 1)]):
        clock.at(minutes=minute)
        await add(client, "a", key, 10, importance)
    await set_budget(client, "a", 20)
    async with connect(redis_url) as r:
        await r.delete(*robot_keys(ns, "a"))  # Redis loses this robot's data
    # The least important goes. (Re-placing oldest first would make room for "third" by
    # evicting "second", which is more important.)
    assert await working_set(client, "a") == (
        [("second", 10, 2.0, False), ("first", 10, 5.0, False)],
        20,
    )
    assert await members_in_postgres(client, ns, "a") == {"first", "second"}
    assert (await event_counts(client, ns))["evict"] == 1


async def test_lowering_the_budget_trims_working_memory_at_once(client) -> None:
    await client.put("/v1/robots/r", json={"working_memory_budget": 100})
    for key, importance in (("low", 1), ("mid", 5), ("high", 9)):
        r = await client.post(
            "/v1/robots/r/memories",
            json={"key": key, "content": text_of(20, key), "importance": importance},
        )
        assert r.json()["working_memory"]["admitted"] is True
    r = await client.put("/v1/robots/r", json={"working_memory_budget": 45})
    assert r.status_code == 200
    wm = (await client.get("/v1/robots/r/working-memory")).json()
    assert ([i["key"] for i in wm["items"]], wm["tokens"], wm["max_tokens"]) == (
        ["mid", "high"],
        40,
        45,
    )
