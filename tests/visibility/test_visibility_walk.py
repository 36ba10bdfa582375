"""Who may see what (issue 35): three robots and a group, each memory visibility, and every
read path answering exactly what each robot may read; writes by a robot that may not change
a memory are refused and write nothing.

ann and bob are the group `team`; cat and dan are on their own. The pool `ops` grants cat
write and dan read."""

from __future__ import annotations

import pytest

PROBLEM = "application/problem+json"
WORD = "zebra"

MEMORIES = [
    # (author, key, extra body)
    ("ann", "ns-fact", {}),
    ("ann", "ann-private", {"visibility": "private"}),
    ("ann", "ann-for-bob", {"visibility": "private", "readers": ["bob"]}),
    ("ann", "team-note", {"visibility": "group"}),
    ("cat", "cat-private", {"visibility": "private"}),
    ("cat", "pool-note", {"pool": "ops"}),
]
# What each robot reads without pools (recall's default) and with the pools it may read.
READS = {
    "ann": {"ns-fact", "ann-private", "ann-for-bob", "team-note"},
    "bob": {"ns-fact", "ann-for-bob", "team-note"},
    "cat": {"ns-fact", "cat-private"},
    "dan": {"ns-fact"},
    "eve": {"ns-fact"},  # never wrote, never granted
}
POOLS = {"cat": {"pool-note"}, "dan": {"pool-note"}}
ROBOTS = sorted(READS)
KEYS = [k for _, k, _ in MEMORIES]


def readable(robot: str) -> set[str]:
    return READS[robot] | POOLS.get(robot, set())


@pytest.fixture
async def world(client):
    r = await client.put("/v1/groups/team", json={"members": ["ann", "bob"]})
    assert r.status_code == 200, r.text
    r = await client.put(
        "/v1/pools/ops", json={"type": "team", "writers": ["cat"], "readers": ["dan"]}
    )
    assert r.status_code == 200, r.text
    for author, key, extra in MEMORIES:
        body = {"key": key, "content": f"{WORD} {key} fact", "tags": [f"t:{key}"], **extra}
        r = await client.post(f"/v1/robots/{author}/memories", json=body)
        assert r.status_code == 201, r.text
    for robot in ("dan", "eve"):
        assert (await client.put(f"/v1/robots/{robot}", json={})).status_code == 200
    return client


async def test_each_memory_answers_what_it_was_written_for(world) -> None:
    r = await world.get("/v1/robots/ann/memories/ann-for-bob")
    body = r.json()
    assert (body["visibility"], body["readers"], body["pool"]) == ("private", ["bob"], None)
    r = await world.get("/v1/robots/cat/memories/pool-note")
    assert (r.json()["visibility"], r.json()["pool"]) == ("pool", "ops")
    r = await world.get("/v1/robots/ann/memories/ns-fact")
    assert (r.json()["visibility"], r.json()["readers"]) == ("namespace", [])


@pytest.mark.parametrize("robot", ROBOTS)
async def test_retrieve_versions_and_history_answer_only_what_the_robot_may_read(
    world, robot
) -> None:
    for key in KEYS:
        for path in ("", "/versions", "/history"):
            r = await world.get(f"/v1/robots/{robot}/memories/{key}{path}")
            expected = 200 if key in readable(robot) else 404
            assert r.status_code == expected, (robot, key, path, r.text)
            if expected == 404:
                assert r.headers["content-type"] == PROBLEM
                # As for a key that does not exist: nothing tells it apart.
                assert r.json()["detail"] == f"memory {key!r} does not exist"
                assert WORD not in r.text


@pytest.mark.parametrize("robot", ROBOTS)
async def test_list_answers_exactly_what_the_robot_may_read(world, robot) -> None:
    r = await world.get(f"/v1/robots/{robot}/memories", params={"limit": 200})
    assert r.status_code == 200
    assert {m["key"] for m in r.json()["items"]} == readable(robot)
    r = await world.get(f"/v1/robots/{robot}/memories", params={"pool": "ops"})
    assert {m["key"] for m in r.json()["items"]} == POOLS.get(robot, set())


@pytest.mark.parametrize("strategy", ["fulltext", "hybrid"])
@pytest.mark.parametrize("robot", ROBOTS)
async def test_recall_answers_what_the_robot_may_read_and_pools_only_when_named(
    world, robot, strategy
) -> None:
    body = {"query": WORD, "strategy": strategy, "limit": 50, "load_into_working_memory": False}
    r = await world.post(f"/v1/robots/{robot}/recall", json=body)
    assert r.status_code == 200, r.text
    assert {h["key"] for h in r.json()["hits"]} == READS[robot]
    r = await world.post(f"/v1/robots/{robot}/recall", json={**body, "pools": ["ops"]})
    if robot in POOLS:
        assert r.status_code == 200, r.text
        assert {h["key"] for h in r.json()["hits"]} == readable(robot)
    else:
        assert r.status_code == 403, r.text
        assert r.headers["content-type"] == PROBLEM
    r = await world.post(f"/v1/robots/{robot}/recall", json={**body, "pools": ["nope"]})
    assert r.status_code == 404


@pytest.mark.parametrize("robot", ROBOTS)
async def test_working_memory_context_and_prompt_hold_only_what_the_robot_may_read(
    world, robot
) -> None:
    body = {"query": WORD, "strategy": "fulltext", "limit": 50}
    if robot in POOLS:
        body["pools"] = ["ops"]
    r = await world.post(f"/v1/robots/{robot}/recall", json=body)
    assert r.status_code == 200, r.text
    wm = await world.get(f"/v1/robots/{robot}/working-memory")
    held = {i["key"] for i in wm.json()["items"]}
    # ann and bob share team's working memory: only what both may read is put there.
    shared = {"ns-fact", "team-note"}
    if robot in ("ann", "bob"):
        assert held <= shared and "team-note" in held and "ns-fact" in held
        not_admitted = set(r.json()["working_memory"]["not_admitted"])
        assert not_admitted == READS[robot] - shared
    else:
        assert held == readable(robot)
    ctx = await world.get(f"/v1/robots/{robot}/context", params={"max_tokens": 10_000})
    said = {k for k in KEYS if f"{WORD} {k} fact" in ctx.json()["text"]}
    assert said == held
    p = await world.post(
        f"/v1/robots/{robot}/prompt",
        json={"input": WORD, "context_window": 4000, "recall": {"strategy": "fulltext"}},
    )
    assert p.status_code == 200, p.text
    text = " ".join(m["content"] for m in p.json()["messages"])
    assert {k for k in KEYS if f"{WORD} {k} fact" in text} <= readable(robot)
    assert {k for k in KEYS if f"{WORD} {k} fact" in text} >= held


async def test_a_members_private_memory_never_reaches_the_groups_working_memory(world) -> None:
    r = await world.post(
        "/v1/robots/ann/memories",
        json={"key": "ann-secret", "content": "ann secret", "visibility": "private"},
    )
    assert r.status_code == 201
    assert r.json()["working_memory"] == {"admitted": False, "reason": "not_shared", "evicted": []}
    held = (await world.get("/v1/robots/bob/working-memory")).json()["items"]
    assert "ann-secret" not in {i["key"] for i in held}


async def test_the_tag_tree_counts_what_every_robot_may_read(world) -> None:
    r = await world.get("/v1/tags")
    assert {c["path"] for n in r.json()["tags"] for c in n["children"]} == {"t:ns-fact"}
    r = await world.get("/v1/tags", params={"robot": "cat"})
    names = {c["path"] for n in r.json()["tags"] for c in n["children"]}
    assert names == {"t:cat-private", "t:pool-note"}


@pytest.mark.parametrize(
    ("robot", "key", "status"),
    [
        ("bob", "ann-private", 404),  # may not read it
        ("cat", "team-note", 404),
        ("bob", "ann-for-bob", 403),  # reads it through a grant: never writes it
        ("dan", "pool-note", 403),  # reads the pool, does not write it
    ],
)
async def test_a_change_by_a_robot_that_may_not_make_it_is_refused_and_writes_nothing(
    world, robot, key, status
) -> None:
    author = dict((k, a) for a, k, _ in MEMORIES)[key]
    before = (await world.get(f"/v1/robots/{author}/memories/{key}")).json()
    calls = [
        world.put(f"/v1/robots/{robot}/memories/{key}", json={"content": "changed"}),
        world.patch(f"/v1/robots/{robot}/memories/{key}", json={"importance": 9}),
        world.delete(f"/v1/robots/{robot}/memories/{key}"),
        world.post(f"/v1/robots/{robot}/memories/{key}/restore"),
        world.post(f"/v1/robots/{robot}/memories", json={"content": "new", "supersedes": [key]}),
    ]
    for n, call in enumerate(calls):
        r = await call
        # A PUT creates a key it cannot read: the key is taken (keys are namespace-wide).
        assert r.status_code == (409 if n == 0 and status == 404 else status), r.text
        assert r.headers["content-type"] == PROBLEM
        assert WORD not in r.text
    after = (await world.get(f"/v1/robots/{author}/memories/{key}")).json()
    assert after == before


async def test_put_narrowing_a_memory_withdraws_it_from_those_who_lose_it(world) -> None:
    await world.post("/v1/robots/cat/recall", json={"query": WORD, "strategy": "fulltext"})
    await world.post("/v1/robots/dan/recall", json={"query": WORD, "strategy": "fulltext"})
    for robot in ("cat", "dan"):
        held = {
            i["key"]
            for i in (await world.get(f"/v1/robots/{robot}/working-memory")).json()["items"]
        }
        assert "ns-fact" in held
    r = await world.put(
        "/v1/robots/ann/memories/ns-fact",
        json={"content": f"{WORD} ns-fact fact", "visibility": "private", "readers": ["dan"]},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["visibility"], r.json()["readers"]) == ("private", ["dan"])
    cat = {i["key"] for i in (await world.get("/v1/robots/cat/working-memory")).json()["items"]}
    assert "ns-fact" not in cat
    assert (await world.get("/v1/robots/cat/memories/ns-fact")).status_code == 404
    assert (await world.get("/v1/robots/dan/memories/ns-fact")).status_code == 200
    # A PUT naming no visibility keeps the memory's.
    r = await world.put("/v1/robots/ann/memories/ns-fact", json={"content": "again"})
    assert (r.json()["visibility"], r.json()["readers"]) == ("private", ["dan"])


async def test_bad_visibility_input_is_422_and_writes_nothing(world) -> None:
    bodies = [
        {"content": "x", "visibility": "group", "readers": ["bob"]},
        {"content": "x", "visibility": "pool"},
        {"content": "x", "visibility": "namespace", "pool": "ops"},
        {"content": "x", "visibility": "everyone"},
        {"content": "x", "visibility": "private", "readers": ["bad name"]},
    ]
    for body in bodies:
        r = await world.post("/v1/robots/cat/memories", json={"key": "bad", **body})
        assert r.status_code == 422, (body, r.text)
    r = await world.post(
        "/v1/robots/cat/memories", json={"key": "bad", "content": "x", "visibility": "group"}
    )
    assert r.status_code == 422  # cat is in no group
    r = await world.post(
        "/v1/robots/dan/memories", json={"key": "bad", "content": "x", "pool": "ops"}
    )
    assert r.status_code == 403  # dan only reads ops
    r = await world.post(
        "/v1/robots/cat/memories", json={"key": "bad", "content": "x", "pool": "no"}
    )
    assert r.status_code == 404
    assert (await world.get("/v1/robots/cat/memories/bad")).status_code == 404


async def test_a_private_or_pool_memory_is_never_a_duplicate_nor_deduplicated(world) -> None:
    r = await world.post(
        "/v1/robots/bob/memories",
        json={"content": f"{WORD} ann-private fact", "dedupe": "exact"},
    )
    assert r.status_code == 201 and r.json()["created"] is True, r.text
    r = await world.post(
        "/v1/robots/ann/memories",
        json={"content": f"{WORD} ns-fact fact", "dedupe": "exact", "visibility": "private"},
    )
    assert r.status_code == 201 and r.json()["created"] is True, r.text


SECRET = "Ann keeps this zebra to herself"  # names Ann: an entity


async def test_no_route_shows_another_robots_private_memory(client) -> None:
    """Every operation of the committed spec, called as bob about ann's private memory (its
    key in every {key}): its content appears in no answer, and its key only where bob names
    it himself."""
    from tests.auth.test_auth import BODIES, spec_operations

    r = await client.post(
        "/v1/robots/ann/memories",
        json={"key": "ann-private", "content": SECRET, "visibility": "private", "tags": ["z"]},
    )
    assert r.status_code == 201
    await client.post("/v1/robots/ann/recall", json={"query": "zebra", "strategy": "fulltext"})
    seen = 0
    for method, path, op_id in spec_operations():
        if op_id in {"keys-revoke", "robots-delete", "tags-rename", "groups-delete"}:
            continue
        url = path.replace("{robot}", "bob").replace("{key}", "ann-private")
        url = url.replace("{version}", "1").replace("{session}", "s1")
        url = url.replace("{group}", "team").replace("{pool}", "ops").replace("{key_id}", "1")
        url = url.replace("{entity}", "Ann")
        body = BODIES.get(op_id)
        if op_id == "recall-search":
            body = {"query": "zebra", "strategy": "fulltext"}
        if op_id == "working-memory-events":
            continue  # a stream: bob's working memory, checked below
        r = await client.request(method, url, json=body)
        assert SECRET not in r.text, (op_id, r.text)
        seen += 1
    assert seen >= 40
    held = (await client.get("/v1/robots/bob/working-memory")).json()["items"]
    assert "ann-private" not in {i["key"] for i in held}


async def test_no_mcp_tool_shows_another_robots_private_memory(live_server_factory) -> None:
    from tests.mcp.test_mcp_tools import mcp_session

    base = live_server_factory(mcp_tools="all")
    ns = {"X-Namespace": f"t-{__import__('uuid').uuid4().hex[:10]}"}
    async with mcp_session(base, **ns, **{"X-Robot": "ann"}) as ann:
        r = await ann.call_tool(
            "remember", {"key": "ann-private", "content": SECRET, "visibility": "private"}
        )
        assert not r.is_error
    calls = {
        "remember": {"content": "bob's own"},
        "recall": {"query": "zebra", "strategy": "fulltext"},
        "context": {},
        "forget": {"key": "ann-private"},
        "stats": {},
        "list_tags": {},
        "entities": {},
        "entity_memories": {"entity": "Ann"},
        "memory_versions": {"key": "ann-private"},
        "memory_history": {"key": "ann-private"},
        "session_append": {"session": "s", "messages": [{"role": "user", "content": "zebra?"}]},
        "session_window": {"session": "s"},
        "prompt": {"input": "zebra", "context_window": 4000},
        "group_create": {"group": "g", "members": ["bob"]},
        "group_recall": {"group": "g", "query": "zebra"},
        "group_status": {"group": "g"},
        "pools": {},
        "memory_list": {},
        "memory_restore": {"key": "ann-private"},
        "memory_importance": {"key": "ann-private", "boost": 1},
        "memory_feedback": {"key": "ann-private", "pinned": True},
        "memory_update": {"key": "ann-private", "content": "bob's"},
    }
    async with mcp_session(base, **ns, **{"X-Robot": "bob"}) as bob:
        listed = {t.name for t in (await bob.list_tools()).tools}
        assert set(calls) <= listed
        for name, args in calls.items():
            r = await bob.call_tool(name, args)
            shown = r.content[0].text + str(r.structured_content)
            assert SECRET not in shown, (name, shown)
        for uri in ("htm://robots/bob/working-memory", "htm://robots/bob/recent", "htm://tags"):
            body = await bob.read_resource(uri)
            assert SECRET not in body.contents[0].text
