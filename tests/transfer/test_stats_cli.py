"""`htm stats` (issue 49, the CLI): a namespace's and a robot's statistics, read through the
same unit of work and service as GET /v1/stats and GET /v1/robots/{robot}/stats: `--json`
prints their bodies, the default a few lines for a person; nothing else on stderr."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from app.transfer.stats_text import size
from tests.stats.test_stats_api import add, get_ok, vec
from tests.transfer.conftest import htm  # noqa: F401  (the fixture)


async def three_memories(client) -> None:
    """ann (budget 40): a fact of 8 tokens and a preference of 10 (that one with its vector);
    bob: a fact of 4 tokens."""
    assert (await client.put("/v1/robots/ann", json={"working_memory_budget": 40})).is_success
    await add(client, "ann", "a1", 8, created_at="2030-01-01T00:00:00Z", word="walrus")
    await add(
        client, "ann", "a2", 10, type="preference", created_at="2030-06-01T12:00:00Z",
        embedding=vec(1),
    )  # fmt: skip
    await add(client, "bob", "b1", 4)


async def test_htm_stats_robot_prints_its_figures(client, ns, htm) -> None:  # noqa: F811
    await three_memories(client)
    out = await asyncio.to_thread(htm, "stats", "--namespace", ns, "--robot", "ann")
    today = datetime.now(UTC).date()
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.splitlines() == [
        "robot ann",
        "working memory: 18 / 40 tokens (45 %), 2 items",
        "long-term: 2 memories (1 fact, 1 preference)",
        "  oldest 2030-01-01 00:00, newest 2030-06-01 12:00 UTC",
        "embeddings: 1 pending, 0 failed",
        "activity in the last 30 days (UTC day: adds, recalls, evictions):",
        f"  {today}: 2, 0, 0",
    ]
    out = await asyncio.to_thread(htm, "stats", "--namespace", ns, "--robot", "ann", "--json")
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(out.stdout) == await get_ok(client, "/v1/robots/ann/stats")


async def test_htm_stats_namespace_prints_what_get_stats_answers(client, ns, htm) -> None:  # noqa: F811
    await three_memories(client)
    answer = await get_ok(client, "/v1/stats")
    out = await asyncio.to_thread(htm, "stats", "--namespace", ns, "--json")
    assert (out.returncode, out.stderr) == (0, "")
    printed = json.loads(out.stdout)
    # The cache of query embeddings is the answering process's own (both empty here).
    assert printed.pop("query_embedding_cache")["entries"] == 0
    del answer["query_embedding_cache"]
    assert printed == answer
    assert (printed["memories"], printed["pending_embeddings"]) == (3, 2)

    out = await asyncio.to_thread(htm, "stats", "--namespace", ns)
    assert (out.returncode, out.stderr) == (0, "")
    v = answer["versions"]
    assert out.stdout.splitlines() == [
        f"namespace {ns}: 3 memories, 0 deleted, {size(answer['memory_bytes'])} stored",
        "embeddings: 2 pending, 0 failed",
        "robots: 2 (working memory use)",
        "  ann  18 / 40 tokens (45 %), 2 items",
        f"  bob  4 / {answer['robots'][1]['working_memory']['max_tokens']} tokens "
        f"({answer['robots'][1]['working_memory']['utilization']:g} %), 1 items",
        f"servers: PostgreSQL {v['postgres']}, pgvector {v['pgvector']}"
        + (f", TimescaleDB {v['timescaledb']}" if v["timescaledb"] else "")
        + f", Redis {v['redis']}",
    ]


async def test_htm_stats_refuses_an_unknown_robot_and_bad_days(client, ns, htm) -> None:  # noqa: F811
    await three_memories(client)
    out = await asyncio.to_thread(htm, "stats", "--namespace", ns, "--robot", "nobody")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == "htm stats: robot 'nobody' does not exist\n"
    for days, why in (("0", "must be at least 1, not 0"), ("367", "must be at most 366, not 367")):
        out = await asyncio.to_thread(htm, "stats", "--robot", "ann", "--days", days)
        assert out.returncode == 2
        assert out.stderr.startswith(f"htm stats: argument --days: {why}"), out.stderr


def test_sizes_read_as_a_person_reads_them() -> None:
    assert [size(n) for n in (0, 999, 1000, 1_234_567, 999_999_999, 5 * 10**12)] == [
        "0 B", "999 B", "1.0 kB", "1.2 MB", "1000.0 MB", "5000.0 GB",
    ]  # fmt: skip
