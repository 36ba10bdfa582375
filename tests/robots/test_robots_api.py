"""Robots: removal of a robot that holds nothing (409 with what it holds otherwise), a
rejected write registers no robot, and a robot removed under another process's cache."""

from __future__ import annotations

import asyncio
import uuid

import pytest

PROBLEM = "application/problem+json"


async def add(client, robot: str, key: str, content: str = "a fact") -> None:
    r = await client.post(f"/v1/robots/{robot}/memories", json={"key": key, "content": content})
    assert r.status_code == 201, r.text


async def robots(client) -> list[str]:
    return [r["name"] for r in (await client.get("/v1/robots")).json()]


async def test_a_robot_that_holds_nothing_is_removed_else_409_says_what_it_holds(client) -> None:
    assert (await client.put("/v1/robots/idle", json={"working_memory_budget": 50})).is_success
    r = await client.delete("/v1/robots/idle")
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["working_memory_budget"]) == ("idle", 50)
    assert (await client.get("/v1/robots/idle")).status_code == 404
    assert (await client.delete("/v1/robots/idle")).status_code == 404

    await add(client, "w", "k1")
    r = await client.delete("/v1/robots/w")
    assert (r.status_code, r.headers["content-type"]) == (409, PROBLEM)
    holds = {"memories": 1, "forgotten_memories": 0, "sessions": 0, "working_memory_items": 1}
    assert r.json()["holds"] == holds
    assert r.json()["detail"] == (
        "robot 'w' still holds 1 memories, 1 working memory items: forget its memories with "
        "a confirmed hard delete, end its sessions and clear its working memory first"
    )
    # A soft delete is restorable: the robot still holds it.
    assert (await client.delete("/v1/robots/w/memories/k1")).status_code == 200
    r = await client.delete("/v1/robots/w")
    assert r.status_code == 409
    assert r.json()["holds"] == {
        **holds,
        "memories": 0,
        "forgotten_memories": 1,
        "working_memory_items": 0,
    }
    r = await client.delete("/v1/robots/w/memories/k1", params={"hard": "true", "confirm": "k1"})
    assert r.status_code == 200
    r = await client.post(
        "/v1/robots/w/sessions/chat/messages",
        json={"messages": [{"role": "user", "content": "hello"}]},
    )
    assert r.status_code == 201, r.text
    r = await client.delete("/v1/robots/w")
    assert (r.status_code, r.json()["holds"]["sessions"]) == (409, 1)
    assert (await client.delete("/v1/robots/w/sessions/chat/messages")).status_code == 200
    assert (await client.delete("/v1/robots/w")).status_code == 200
    assert await robots(client) == []

    # Registered again under the name, it starts empty.
    await add(client, "w", "k2", "the new robot's fact")
    wm = (await client.get("/v1/robots/w/working-memory")).json()
    assert [i["key"] for i in wm["items"]] == ["k2"]


async def test_removal_is_for_admins_and_leaves_other_namespaces_alone(app_factory) -> None:
    from tests.auth.test_auth import bearer, make_key

    ns, other = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    async with app_factory(auth_enabled=True) as c:
        admin, writer = await make_key(c, ns, "admin"), await make_key(c, ns, "writer")
        other_admin = await make_key(c, other, "admin")
        assert (await c.put("/v1/robots/r", json={}, headers=bearer(writer))).is_success
        r = await c.delete("/v1/robots/r", headers=bearer(writer))
        assert (r.status_code, r.json()["required"]) == (403, "admin")
        assert (await c.delete("/v1/robots/r", headers=bearer(other_admin))).status_code == 404
        assert (await c.get("/v1/robots/r", headers=bearer(writer))).status_code == 200
        assert (await c.delete("/v1/robots/r", headers=bearer(admin))).status_code == 200


async def test_a_rejected_add_registers_no_robot(client) -> None:
    await add(client, "a", "taken")
    for body in (
        {"key": "taken", "content": "again"},
        {"memories": [{"key": "free", "content": "x"}, {"key": "taken", "content": "y"}]},
    ):
        path = "/memories/batch" if "memories" in body else "/memories"
        r = await client.post(f"/v1/robots/ghost{path}", json=body)
        assert r.status_code == 409, r.text
        assert (await client.get("/v1/robots/ghost")).status_code == 404
    assert await robots(client) == ["a"]
    assert (await client.get("/v1/robots/a/memories/free")).status_code == 404
    # A robot that existed before keeps existing after its rejected add.
    r = await client.post("/v1/robots/a/memories", json={"key": "taken", "content": "z"})
    assert r.status_code == 409
    assert await robots(client) == ["a"]


async def test_an_add_by_a_robot_another_process_removed_registers_it_again(
    app_factory, ns: str
) -> None:
    async with app_factory() as one, app_factory() as two:
        for c in (one, two):
            c.headers["X-Namespace"] = ns
        assert (await two.put("/v1/robots/r", json={})).is_success
        assert (await two.get("/v1/robots/r/working-memory")).status_code == 200  # cached
        assert (await one.delete("/v1/robots/r")).status_code == 200
        # `two` still holds the removed robot's row in its cache: its foreign key finds
        # nothing, and the add registers the robot again.
        r = await two.post("/v1/robots/r/memories", json={"key": "k", "content": "after"})
        assert r.status_code == 201, r.text
        assert (await one.get("/v1/robots/r/memories/k")).json()["content"] == "after"
        assert await robots(one) == ["r"]


async def test_names_are_checked_where_they_are_registered_whatever_the_way_in(
    client, ns: str
) -> None:
    """The services that register names apply the rule themselves: a way in that skips the
    HTTP parameter check (the CLI once did) still cannot store a name the API refuses."""
    from app.errors import Unprocessable
    from app.namespaces.repository import NamespaceRepository
    from app.unit import operator
    from app.unit import unit_of_work as request

    c = client.app.state.components
    caller = await operator(c, ns)
    for bad in ("bad robot!", "", "x" * 65, "group:a"):
        async with request(c, caller) as r:
            with pytest.raises(Unprocessable) as refused:
                await r.robots.register(bad)
        assert refused.value.extra["errors"][0]["field"] == "robot"
    with pytest.raises(Unprocessable):
        await NamespaceRepository.resolve(c.sessionmaker, c.namespace_ids, "bad ns!")
    assert await robots(client) == []


async def test_a_put_by_a_robot_another_process_removed_registers_it_again(
    app_factory, ns: str
) -> None:
    async with app_factory() as one, app_factory() as two:
        for c in (one, two):
            c.headers["X-Namespace"] = ns
        assert (await two.put("/v1/robots/r", json={})).is_success
        assert (await two.get("/v1/robots/r/working-memory")).status_code == 200  # cached
        assert (await one.delete("/v1/robots/r")).status_code == 200
        r = await two.put("/v1/robots/r/memories/k", json={"content": "after"})
        assert r.status_code == 201, r.text
        assert await robots(one) == ["r"]


async def test_a_rejected_add_keeps_a_robot_a_concurrent_request_wrote(client) -> None:
    """The registration is undone only if the robot's row is still as it wrote it."""
    from app.unit import operator
    from app.unit import unit_of_work as request

    await add(client, "a", "taken")
    c = client.app.state.components
    caller = await operator(c, client.headers["X-Namespace"])
    async with request(c, caller) as r:
        robot, version = await r.robots.register("fresh")
        assert version is not None
    # Another request sets its budget meanwhile (a PUT writes the row).
    assert (await client.put("/v1/robots/fresh", json={"working_memory_budget": 9})).is_success
    async with request(c, caller) as r:
        await r.robots.discard(robot, version)
    assert (await client.get("/v1/robots/fresh")).json()["working_memory_budget"] == 9


async def test_discarding_a_registration_never_waits_for_a_write_in_flight(client) -> None:
    """A refused write's registration is undone only when nothing uses the robot: a write in
    flight that refers to it (its foreign key check holds FOR KEY SHARE on the row) keeps
    it, and the discard does not wait for that write (RobotService.discard)."""
    from sqlalchemy import text

    from app.unit import operator
    from app.unit import unit_of_work as request

    c = client.app.state.components
    caller = await operator(c, client.headers["X-Namespace"])
    async with request(c, caller) as r:
        robot, version = await r.robots.register("fresh")
    assert version is not None
    async with c.sessionmaker() as in_flight:
        await in_flight.execute(
            text("SELECT 1 FROM robot WHERE id = :id FOR KEY SHARE"), {"id": robot.id}
        )
        async with request(c, caller) as r:
            await asyncio.wait_for(r.robots.discard(robot, version), 2)
        await in_flight.rollback()
    assert await robots(client) == ["fresh"]
    # Once nothing uses it, the same discard removes it.
    async with request(c, caller) as r:
        await r.robots.discard(robot, version)
    assert await robots(client) == []


async def test_last_seen_is_refreshed_when_a_minute_old_and_not_before(client) -> None:
    """A robot's last_seen_at moves on its first request once it is over a minute old
    (RobotRepository._seen, under a savepoint), and is left alone before that."""
    from sqlalchemy import text

    r = await client.post("/v1/robots/seen/memories", json={"key": "k1", "content": "one"})
    assert r.status_code == 201
    components = client.app.state.components
    ns = client.headers["X-Namespace"]

    async def last_seen_age_s() -> float:
        async with components.sessionmaker() as s:
            age = (
                await s.execute(
                    text(
                        "SELECT extract(epoch FROM now() - r.last_seen_at) FROM robot r"
                        " JOIN namespace n ON n.id = r.namespace_id"
                        " WHERE n.name = :ns AND r.name = 'seen'"
                    ),
                    {"ns": ns},
                )
            ).scalar_one()
            await s.rollback()
        return float(age)

    async with components.sessionmaker() as s:
        await s.execute(
            text(
                "UPDATE robot SET last_seen_at = now() - interval '30 seconds'"
                " WHERE name = 'seen' AND namespace_id = (SELECT id FROM namespace"
                " WHERE name = :ns)"
            ),
            {"ns": ns},
        )
        await s.commit()
    components.two_tier.robots.clear()  # the next request reads the row (RobotRepository.ensure)
    r = await client.post("/v1/robots/seen/memories", json={"key": "k2", "content": "two"})
    assert r.status_code == 201
    assert 29 < await last_seen_age_s() < 60  # under a minute: not written
    async with components.sessionmaker() as s:
        await s.execute(
            text(
                "UPDATE robot SET last_seen_at = now() - interval '2 minutes'"
                " WHERE name = 'seen' AND namespace_id = (SELECT id FROM namespace"
                " WHERE name = :ns)"
            ),
            {"ns": ns},
        )
        await s.commit()
    components.two_tier.robots.clear()
    r = await client.post("/v1/robots/seen/memories", json={"key": "k3", "content": "three"})
    assert r.status_code == 201
    assert await last_seen_age_s() < 5
