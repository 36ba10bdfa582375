"""Batches whose content is too much for one statement under the statement timeout
(app/memories/adds.py): stored by several statements in one transaction, all or nothing,
and the largest batch the documented limits allow is a 201."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import pytest

from app.config import Settings
from app.db.vectors import StoredVectors
from app.memories.adds import GroupCommit, statement_chars
from app.memories.model import AddGroup
from tests.memories.test_group_commit import _robot, _stored_keys, draft


def group(ns_id: int, robot: int, keys: list[str], size: int = 30) -> AddGroup:
    return AddGroup(ns_id, robot, [draft(k, k.ljust(size, ".")) for k in keys], None)


async def test_an_add_over_one_statements_content_takes_several_in_one_commit(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), max_chars=100)
    keys = [f"k{i}" for i in range(10)]
    stored = await commit.store(group(ns_id, robot, keys))  # 300 characters: parts of 3
    assert (stored.taken, sorted(stored.claimed)) == ([], sorted(keys))
    assert (commit.statements, commit.commits, commit.memories) == (4, 1, 10)
    assert await _stored_keys(client, ns_id) == set(keys)


async def test_a_key_taken_in_a_later_statement_stores_nothing_of_the_add(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(client.app.state.components.sessionmaker, StoredVectors(), max_chars=100)
    await commit.store(group(ns_id, robot, ["old"]))
    keys = [f"k{i}" for i in range(9)]
    stored = await commit.store(group(ns_id, robot, [*keys[:4], "old", *keys[4:], "old2"]))
    assert (stored.taken, stored.claimed) == (["old"], {})
    # The first part (k0-k2) was inserted, then rolled back with the rest: nothing is left,
    # no memory and no claimed key.
    assert await _stored_keys(client, ns_id) == {"old"}
    assert commit.commits == 1  # only the first add's
    again = await commit.store(group(ns_id, robot, keys))  # the keys were never held
    assert sorted(again.claimed) == sorted(keys)


async def test_queued_adds_share_a_statement_only_as_far_as_its_content_allows(client, ns) -> None:
    ns_id, robot = await _robot(client, ns, "a")
    commit = GroupCommit(
        client.app.state.components.sessionmaker, StoredVectors(), max_chars=100, flushes=1
    )
    groups = [group(ns_id, robot, [f"k{i}"], size=40) for i in range(5)]
    await asyncio.gather(*(commit.store(g) for g in groups))
    assert (commit.statements, commit.commits, commit.adds) == (3, 3, 5)  # 2 + 2 + 1


def test_the_budget_follows_the_statement_timeout() -> None:
    assert statement_chars(Settings(_env_file=None).statement_timeout_ms) == 2_000_000
    assert statement_chars(500) == 200_000
    assert statement_chars(0) is None  # no timeout: one statement, as before


def hex_words(rng: random.Random, chars: int) -> str:
    """Random hex tokens, the slowest content to index that was measured (adds.py)."""
    words: list[str] = []
    total = 0
    while total < chars:
        words.append(f"{rng.getrandbits(48):x}"[: rng.randint(4, 12)])
        total += len(words[-1]) + 1
    return " ".join(words)[:chars]


@pytest.mark.slow
async def test_the_largest_batch_the_documented_limits_allow_is_stored_whole(app_factory) -> None:
    # HTM_MAX_BATCH_SIZE memories with client vectors, each as large as HTM_MAX_BODY_BYTES
    # leaves room for (~25 KB), on the default statement timeout (5 s): one INSERT of it
    # took longer and the batch answered 503 every time.
    settings = Settings(_env_file=None)
    ns = f"t-{uuid.uuid4().hex[:10]}"
    rng = random.Random(29)
    n = settings.max_batch_size
    vectors = [[rng.uniform(-1, 1) for _ in range(384)] for _ in range(n)]
    room = settings.max_body_bytes - sum(len(json.dumps(v)) + 60 for v in vectors) - 100
    memories = [
        {"key": f"m{i}", "content": hex_words(rng, room // n), "embedding": v}
        for i, v in enumerate(vectors)
    ]
    async with app_factory() as client:
        client.headers["X-Namespace"] = ns
        r = await client.post("/v1/robots/a/memories/batch", json={"memories": memories})
        assert int(r.request.headers["content-length"]) <= settings.max_body_bytes
        assert r.status_code == 201, r.text[:500]
        assert [m["key"] for m in r.json()["memories"]] == [f"m{i}" for i in range(n)]
        stats = (await client.get("/v1/stats")).json()
        assert stats["memories"] == n
        assert client.app.state.components.group_commit.statements > 1  # type: ignore[attr-defined]
