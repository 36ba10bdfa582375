"""Robot groups: members share one working memory (reads, writes, budget), membership by PUT,
one group per robot (409), bad input 422 with nothing written, delete."""

from __future__ import annotations

PROBLEM = "application/problem+json"


async def wm(client, robot: str) -> tuple[str | None, list[str], int]:
    r = await client.get(f"/v1/robots/{robot}/working-memory")
    assert r.status_code == 200, r.text
    body = r.json()
    return body["group"], [i["key"] for i in body["items"]], body["max_tokens"]


async def add(client, robot: str, key: str, content: str, importance: float = 1) -> dict:
    r = await client.post(
        f"/v1/robots/{robot}/memories",
        json={"key": key, "content": content, "importance": importance},
    )
    assert r.status_code == 201, r.text
    return r.json()["working_memory"]


async def test_members_share_one_working_memory_and_its_budget(client) -> None:
    r = await client.put(
        "/v1/groups/support", json={"members": ["b", "a"], "working_memory_budget": 12}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "name": "support",
        "members": ["a", "b"],
        "working_memory_budget": 12,
        "working_memory_budget_is_default": False,
    }
    await add(client, "a", "k1", "one two three four five", importance=5)  # 5 tokens
    await add(client, "c", "k2", "outside the group")
    assert await wm(client, "b") == ("support", ["k1"], 12)
    assert await wm(client, "a") == ("support", ["k1"], 12)
    assert (await wm(client, "c"))[:2] == (None, ["k2"])
    # b writes into the shared memory; the group's budget evicts across members' items
    outcome = await add(client, "b", "k3", "six seven eight nine ten eleven twelve", importance=1)
    assert outcome["admitted"] is True
    outcome = await add(client, "b", "k4", "alpha beta gamma", importance=2)
    assert outcome == {"admitted": True, "evicted": ["k3"], "reason": "admitted"}
    assert await wm(client, "a") == ("support", ["k4", "k1"], 12)
    ctx = (await client.get("/v1/robots/a/context", params={"strategy": "important"})).json()
    assert [i["key"] for i in ctx["items"]] == ["k1", "k4"]
    robots = {r["name"]: r["group"] for r in (await client.get("/v1/robots")).json()}
    assert robots == {"a": "support", "b": "support", "c": None}


async def test_membership_is_set_by_put_and_a_leaver_has_its_own_memory_again(client) -> None:
    await add(client, "b", "own", "b's own memory")
    await client.put("/v1/groups/g", json={"members": ["a", "b"]})
    await add(client, "a", "shared", "the group's memory")
    assert (await wm(client, "b"))[:2] == ("g", ["shared"])
    r = await client.put("/v1/groups/g", json={"members": ["a", "c"]})
    assert r.json()["members"] == ["a", "c"]
    assert (await wm(client, "b"))[:2] == (None, ["own"])
    assert (await wm(client, "c"))[:2] == ("g", ["shared"])
    listed = (await client.get("/v1/groups")).json()
    assert [(g["name"], g["members"]) for g in listed] == [("g", ["a", "c"])]


async def test_a_robot_of_another_group_is_a_409_and_nothing_changes(client) -> None:
    await client.put("/v1/groups/g1", json={"members": ["a"]})
    r = await client.put("/v1/groups/g2", json={"members": ["b", "a"]})
    assert r.status_code == 409
    assert r.headers["content-type"] == PROBLEM
    assert r.json()["detail"] == (
        "robots already in another group: a (group g1); take them out of it first"
    )
    assert (await client.get("/v1/groups/g2")).status_code == 404
    assert [r["name"] for r in (await client.get("/v1/robots")).json()] == ["a"]


async def test_bad_groups_are_422_and_write_nothing(client) -> None:
    for name, body in (
        ("g", {"members": ["a", "a"]}),
        ("g", {"members": ["a:b"]}),
        ("g", {"members": ["a"], "working_memory_budget": 0}),
        ("g", {"members": "a"}),
        ("g", {}),
        ("g:x", {"members": ["a"]}),
    ):
        r = await client.put(f"/v1/groups/{name}", json=body)
        assert r.status_code == 422, (name, body)
        assert r.headers["content-type"] == PROBLEM
    assert (await client.get("/v1/groups")).json() == []
    assert (await client.get("/v1/robots")).json() == []


async def test_deleting_a_group_clears_its_memory_and_frees_its_members(client) -> None:
    await client.put("/v1/groups/g", json={"members": ["a", "b"]})
    await add(client, "a", "k1", "shared")
    r = await client.delete("/v1/groups/g")
    assert (r.status_code, r.json()["members"]) == (200, ["a", "b"])
    assert (await client.get("/v1/groups/g")).status_code == 404
    assert (await wm(client, "a"))[:2] == (None, [])
    assert (await client.delete("/v1/groups/g")).status_code == 404
    await client.put("/v1/groups/g", json={"members": ["b"]})  # a fresh group: empty
    assert (await wm(client, "b"))[:2] == ("g", [])


async def test_a_member_s_stats_read_the_group_s_budget_and_usage_at_once(client) -> None:
    await client.put("/v1/robots/a", json={"working_memory_budget": 1000})
    r = await client.put("/v1/groups/g", json={"members": ["a"], "working_memory_budget": 100})
    assert r.status_code == 200
    await add(client, "a", "k1", "one two three four five six seven eight nine ten")  # 10
    expected = {
        "group": "g",
        "tokens": 10,
        "max_tokens": 100,
        "utilization": 10.0,
        "items": 1,
        "degraded": False,
    }
    assert (await client.get("/v1/robots/a/stats")).json()["working_memory"] == expected
    usage = {
        u["robot"]: u["working_memory"] for u in (await client.get("/v1/stats")).json()["robots"]
    }
    assert usage == {"a": expected}
    # A budget change is read by the members of this process at once.
    r = await client.put("/v1/groups/g", json={"members": ["a"], "working_memory_budget": 40})
    assert r.status_code == 200
    changed = {**expected, "max_tokens": 40, "utilization": 25.0}
    assert (await client.get("/v1/robots/a/stats")).json()["working_memory"] == changed
    assert (await wm(client, "a")) == ("g", ["k1"], 40)
    # Out of the group, the robot's own budget and (empty) working memory again.
    await client.put("/v1/groups/g", json={"members": [], "working_memory_budget": 40})
    own = (await client.get("/v1/robots/a/stats")).json()["working_memory"]
    assert (own["group"], own["max_tokens"], own["tokens"]) == (None, 1000, 0)
