"""Group commit (app/memories/adds.py): concurrent adds share one transaction and one
statement, each is acknowledged only after that commit, and a failing add fails alone."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import text

from app.db.vectors import StoredVectors
from app.memories.adds import GroupCommit
from app.memories.model import AddGroup, MemoryDraft


def vec(i: int) -> list[float]:
    v = [0.0] * 384
    v[i % 384] = 1.0
    return v


def draft(key: str, content: str | None = None) -> MemoryDraft:
    return MemoryDraft(
        key=key,
        created_at=None,
        content=content or f"about {key}",
        type="fact",
        importance=1.0,
        tags=[],
        metadata={},
        token_count=3,
        embedding=None,
        embedding_model=None,
    )


async def _robot(client, ns: str, name: str) -> tuple[int, int]:
    await client.put(f"/v1/robots/{name}", json={})
    async with client.app.state.components.sessionmaker() as s:
        row = (
            await s.execute(
                text(
                    "SELECT n.id AS ns, r.id AS robot FROM namespace n"
                    " JOIN robot r ON r.namespace_id = n.id WHERE n.name = :ns AND r.name = :r"
                ),
                {"ns": ns, "r": name},
            )
        ).one()
    return row.ns, row.robot


async def _stored_keys(client, ns_id: int) -> set[str]:
    async with client.app.state.components.sessionmaker() as s:
        keys = (
            await s.execute(text("SELECT key FROM memory WHERE namespace_id = :ns"), {"ns": ns_id})
        ).scalars()
        claims = (
            await s.execute(
                text("SELECT key FROM memory_key WHERE namespace_id = :ns"), {"ns": ns_id}
            )
        ).scalars()
    assert set(claims) == set(keys)  # no key claimed without its memory
    return set(keys)


async def test_queued_adds_share_one_commit_and_each_gets_its_own_answer(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), max_rows=1000)
    groups = [AddGroup(ns_id, robot, [draft(f"k{i}"), draft(f"k{i}b")], None) for i in range(12)]
    results = await asyncio.gather(*(commit.store(g) for g in groups))
    assert (commit.commits, commit.adds) == (1, 12)
    for i, r in enumerate(results):
        assert r.taken == [] and sorted(r.claimed) == sorted([f"k{i}", f"k{i}b"])
    assert len({mid for r in results for mid, _ in r.claimed.values()}) == 24
    assert await _stored_keys(client, ns_id) == {f"k{i}{s}" for i in range(12) for s in ("", "b")}


async def test_a_group_bounded_by_max_rows_commits_in_several_transactions(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), max_rows=4)
    groups = [AddGroup(ns_id, robot, [draft(f"k{i}"), draft(f"k{i}b")], None) for i in range(6)]
    await asyncio.gather(*(commit.store(g) for g in groups))
    assert (commit.commits, commit.adds) == (3, 6)  # two adds (four memories) per commit


def spoken(key: str, speaker: str) -> MemoryDraft:
    return replace(draft(key), metadata={"speaker": speaker, "session": 1})


@pytest.mark.parametrize("apart", [False, True], ids=["one statement", "apart (Citus)"])
async def test_a_taken_key_fails_only_its_own_add_and_its_other_keys_are_released(
    client, ns, apart: bool
) -> None:
    """Both ways of storing a flush (one statement; on Citus statements apart, forced here on
    plain PostgreSQL) answer and write the same: a group with a taken key stores nothing and
    logs no event, the others their memories, events and speakers."""
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), apart=apart)
    await commit.store(AddGroup(ns_id, robot, [draft("old")], None))
    groups = [
        AddGroup(ns_id, robot, [draft("x1"), draft("old"), spoken("x2", "Xavi")], None),
        AddGroup(ns_id, robot, [spoken("y1", "Yara")], None),
        AddGroup(ns_id, robot, [draft("same"), spoken("z1", "Yara")], None),  # claims "same"
        AddGroup(ns_id, robot, [draft("w1"), draft("same")], None),  # "same": taken above
    ]
    results = await asyncio.gather(*(commit.store(g) for g in groups))
    assert commit.commits == 2  # the first add, then all four together
    assert [(sorted(r.claimed), r.taken) for r in results] == [
        ([], ["old"]),
        (["y1"], []),
        (["same", "z1"], []),
        ([], ["same"]),
    ]
    assert await _stored_keys(client, ns_id) == {"old", "y1", "same", "z1"}
    ids = {k: mid for r in results for k, (mid, _) in r.claimed.items()}
    async with client.app.state.components.sessionmaker() as s:
        events = (
            await s.execute(
                text(
                    "SELECT e.memory_id, m.key FROM memory_event e JOIN memory m"
                    " ON m.id = e.memory_id WHERE e.namespace_id = :ns AND e.kind = 'add'"
                ),
                {"ns": ns_id},
            )
        ).all()
        speakers = (
            await s.execute(
                text("SELECT name FROM speaker WHERE namespace_id = :ns ORDER BY name"),
                {"ns": ns_id},
            )
        ).scalars()
        rows = (
            await s.execute(
                text(
                    "SELECT key, content, metadata, embedding_status FROM memory"
                    " WHERE namespace_id = :ns AND key <> 'old' ORDER BY key"
                ),
                {"ns": ns_id},
            )
        ).all()
    assert sorted((k for _, k in events)) == ["old", "same", "y1", "z1"]
    assert all(ids[k] == mid for mid, k in events if k != "old")
    assert list(speakers) == ["Yara"]
    assert [tuple(r) for r in rows] == [
        ("same", "about same", {}, "pending"),
        ("y1", "about y1", {"speaker": "Yara", "session": 1}, "pending"),
        ("z1", "about z1", {"speaker": "Yara", "session": 1}, "pending"),
    ]


async def test_concurrent_adds_over_http_get_one_201_per_add_and_one_409_per_clash(
    client, ns
) -> None:
    bodies = [{"key": f"h{i}", "content": f"fact {i}", "embedding": vec(i)} for i in range(20)]
    bodies += [{"key": "clash", "content": "one", "embedding": vec(1)}] * 2
    responses = await asyncio.gather(
        *(client.post("/v1/robots/a/memories", json=b) for b in bodies)
    )
    codes = [r.status_code for r in responses]
    assert codes[:20] == [201] * 20 and sorted(codes[20:]) == [201, 409]
    assert [r.json()["key"] for r in responses[:20]] == [f"h{i}" for i in range(20)]
    listed = (await client.get("/v1/robots/a/memories", params={"limit": 100})).json()["items"]
    assert sorted(m["key"] for m in listed) == sorted([f"h{i}" for i in range(20)] + ["clash"])
    wm = (await client.get("/v1/robots/a/working-memory")).json()
    assert sorted(i["key"] for i in wm["items"]) == sorted(m["key"] for m in listed)


@pytest.fixture
async def refusing_trigger(client):  # type: ignore[no-untyped-def]
    """The database refuses (as a deadlock would) any memory whose content is 'boom'."""
    name = f"refuse_{uuid.uuid4().hex[:8]}"
    async with client.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(
            text(f"""
            CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.content = 'boom' THEN
                    RAISE EXCEPTION 'refused' USING ERRCODE = '40P01';
                END IF;
                RETURN NEW;
            END $$""")
        )
        await s.execute(
            text(
                f"CREATE TRIGGER {name} BEFORE INSERT ON memory FOR EACH ROW "
                f"EXECUTE FUNCTION {name}()"
            )
        )
    yield
    async with client.app.state.components.sessionmaker() as s, s.begin():
        await s.execute(text(f"DROP TRIGGER {name} ON memory"))
        await s.execute(text(f"DROP FUNCTION {name}()"))


@pytest.mark.usefixtures("refusing_trigger")
async def test_a_row_the_database_refuses_fails_only_its_own_add(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors())
    groups = [
        AddGroup(ns_id, robot, [draft("ok1")], None),
        AddGroup(ns_id, robot, [draft("bad1"), draft("bad2", "boom")], None),
        AddGroup(ns_id, robot, [draft("ok2")], None),
    ]
    results = await asyncio.gather(*(commit.store(g) for g in groups), return_exceptions=True)
    assert sorted(results[0].claimed) == ["ok1"] and sorted(results[2].claimed) == ["ok2"]
    assert "refused" in str(results[1])
    # The shared transaction failed, then each add ran alone: two of them committed.
    assert (commit.commits, commit.adds) == (2, 2)
    assert await _stored_keys(client, ns_id) == {"ok1", "ok2"}

    # Over HTTP the refused add is the 503 of a deadlock (retry: true); the others are 201.
    codes = await asyncio.gather(
        client.post("/v1/robots/a/memories", json={"key": "h1", "content": "fine"}),
        client.post("/v1/robots/a/memories", json={"key": "h2", "content": "boom"}),
        client.post("/v1/robots/a/memories", json={"key": "h3", "content": "fine too"}),
    )
    assert [r.status_code for r in codes] == [201, 503, 201]
    assert codes[1].json()["retry"] is True
    assert await _stored_keys(client, ns_id) == {"ok1", "ok2", "h1", "h3"}


async def test_more_concurrent_adds_than_pooled_connections_all_commit(app_factory) -> None:
    """An add waiting for its group holds no connection: with 2 pooled connections, 12
    concurrent adds (each of which also uses one before and after the group's commit) all
    finish. Holding one while waiting would starve the group's own transaction."""
    async with app_factory(db_pool_size=2, db_max_overflow=0, dedupe="off") as c:
        c.headers["X-Namespace"] = f"pool-{uuid.uuid4().hex[:8]}"
        # New robots: each add registers its robot on its own connection first.
        responses = await asyncio.wait_for(
            asyncio.gather(
                *(
                    c.post(f"/v1/robots/r{i}/memories", json={"key": f"p{i}", "content": "n"})
                    for i in range(12)
                )
            ),
            timeout=20,
        )
        assert [r.status_code for r in responses] == [201] * 12
        listed = (await c.get("/v1/robots/r0/memories", params={"limit": 50})).json()["items"]
        assert sorted(m["key"] for m in listed) == sorted(f"p{i}" for i in range(12))


@pytest.mark.parametrize("flushes", [1, 2])
async def test_a_second_flush_commits_while_the_first_waits_only_when_two_may_run(
    client, ns, flushes: int
) -> None:
    """With two flushers (the default) an add does not queue behind a flush that is waiting
    in PostgreSQL (for a lock here; for the HNSW insert of a 500-memory batch in a bulk
    load); with one, it does."""
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), flushes=flushes)
    async with client.app.state.components.sessionmaker() as blocker, blocker.begin():
        # An uncommitted claim of "k": the flush that claims it waits for this transaction.
        await blocker.execute(
            text(
                "INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)"
                " VALUES (:ns, 'k', -1, now())"
            ),
            {"ns": ns_id},
        )
        first = asyncio.create_task(commit.store(AddGroup(ns_id, robot, [draft("k")], None)))
        await asyncio.sleep(0.3)
        second = asyncio.create_task(commit.store(AddGroup(ns_id, robot, [draft("b")], None)))
        done, _ = await asyncio.wait({second}, timeout=3)
        assert (second in done, first.done()) == (flushes == 2, False)
        await blocker.rollback()
    assert sorted((await first).claimed) == ["k"]
    assert sorted((await second).claimed) == ["b"]
    assert commit.commits == 2
    assert await _stored_keys(client, ns_id) == {"k", "b"}
