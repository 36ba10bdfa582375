"""Citus (issue 50, first steps): a coordinator and two workers started from the embedded
binaries (bench/citus_cluster.py), a fresh database migrated on it, the namespace-scoped
tables distributed by migration 0031, and recall's statements for one namespace planned as
one task on one shard (Citus's router executor).

Citus ships in no registry this project installs from: these tests run only where it was
built and installed into the embedded server's binaries, and skip, saying why, elsewhere
(CI). docs/SCALING.md says what is built and measured on Citus and what is not.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.db.sql import vector_text
from app.recall.planner import TextPlan
from app.recall.query import SearchFilters, where
from app.recall.statements import fulltext_search, vector_search
from bench import citus_cluster
from bench.citus_cluster import Cluster

pytestmark = pytest.mark.citus

M0031 = next((Path(__file__).parents[2] / "alembic" / "versions").glob("*_0031_*.py"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    version = citus_cluster.available()
    if version is None:
        pytest.skip(
            "citus is not installed in the embedded PostgreSQL binaries "
            "(pg_available_extensions has no citus); docs/SCALING.md says how to build it"
        )
    # Not under pytest's tmp_path: the servers' user must reach the directories.
    base = Path(tempfile.mkdtemp(prefix="htm-citus-"))
    try:
        made = citus_cluster.make_cluster(base, workers=2)
        yield made
        made.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
async def citus_url(cluster: Cluster) -> str:
    """A fresh database on every node, migrated on the coordinator to head."""
    import asyncio

    from app.db.migrate import upgrade

    url = await cluster.database(f"htm_citus_{uuid.uuid4().hex[:8]}")
    await asyncio.to_thread(upgrade, url)
    return url


async def _connect(url: str) -> asyncpg.Connection:
    u = make_url(url)
    return await asyncpg.connect(host=u.host, port=u.port, user=u.username, database=u.database)


async def test_0031_distributes_by_namespace_colocated_with_reference_tables(
    citus_url: str,
) -> None:
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("htm_test_migration_0031", M0031)
    assert spec is not None and spec.loader is not None
    m0031 = module_from_spec(spec)
    spec.loader.exec_module(m0031)

    conn = await _connect(citus_url)
    try:
        rows = await conn.fetch("""
            SELECT logicalrelid::text AS tbl, partmethod::text AS partmethod,
                   column_to_column_name(logicalrelid, partkey) AS col, colocationid
            FROM pg_dist_partition ORDER BY 1""")
        shards = await conn.fetchval(
            "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'memory'::regclass"
        )
        placed = await conn.fetchval("""
            SELECT count(DISTINCT groupid) FROM pg_dist_placement p
            JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = 'memory'::regclass""")
        keys = await conn.fetch("""
            SELECT conrelid::regclass::text AS tbl, pg_get_constraintdef(oid) AS def
            FROM pg_constraint WHERE contype IN ('p', 'u')
              AND conrelid IN ('memory'::regclass, 'memory_key'::regclass,
                               'memory_event'::regclass, 'memory_link'::regclass)
            ORDER BY 1, 2""")
    finally:
        await conn.close()
    distributed = {r["tbl"] for r in rows if r["partmethod"] == "h"}
    reference = {r["tbl"] for r in rows if r["partmethod"] == "n"}
    assert distributed == set(m0031.DISTRIBUTED)
    assert reference == set(m0031.REFERENCE) | set(m0031.NO_NAMESPACE_COLUMN)
    assert {r["col"] for r in rows if r["partmethod"] == "h"} == {"namespace_id"}
    # One co-location group: a namespace's rows of every distributed table on one node.
    assert len({r["colocationid"] for r in rows if r["partmethod"] == "h"}) == 1
    assert shards == m0031.SHARD_COUNT
    assert placed == 2  # the two workers
    assert [(r["tbl"], r["def"]) for r in keys] == [
        ("memory", "PRIMARY KEY (namespace_id, id, created_at)"),
        ("memory_event", "PRIMARY KEY (namespace_id, id, at)"),
        ("memory_key", "PRIMARY KEY (namespace_id, key)"),
        ("memory_key", "UNIQUE (namespace_id, memory_id)"),
        ("memory_link", "PRIMARY KEY (namespace_id, source_id, target_id, type)"),
    ]


def _numbered(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """`:name` binds as asyncpg's $n (what app.db.session sends), with their values."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"(?<!:):([a-z_]+)\b", number, sql), [params[n] for n in names]


def _task_counts(plan: Any) -> list[int]:
    found: list[int] = []
    if isinstance(plan, dict):
        if "Task Count" in plan:
            found.append(plan["Task Count"])
        for value in plan.values():
            found += _task_counts(value)
    elif isinstance(plan, list):
        for item in plan:
            found += _task_counts(item)
    return found


def _statements(namespace_id: int, dim: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Recall's own statements (app.recall.statements) for one namespace, unfiltered."""
    eligible = where(namespace_id, SearchFilters())
    vec = {"qvec": vector_text([1.0] + [0.0] * (dim - 1)), "vec_n": 5, **eligible.params}
    words = TextPlan(all_q="'walrus'", rare_q=None, common_q=None)
    return {
        "vector-hnsw": (vector_search(eligible.sql, False, "halfvec", configure=False), vec),
        "vector-exact": (vector_search(eligible.sql, True, "halfvec", configure=False), vec),
        "fulltext": (
            fulltext_search(eligible.sql, words),
            {"all_q": words.all_q, "text_n": 5, **eligible.params},
        ),
    }


@pytest.mark.parametrize("statement", ["vector-hnsw", "vector-exact", "fulltext"])
async def test_a_recall_statement_in_one_namespace_is_one_router_task(
    citus_url: str, statement: str
) -> None:
    """The whole statement, its CTEs and its joins back to memory (each repeating the
    namespace: statements.same_memory), goes to one shard as one task; robot and
    memory_access, reference tables, join on the worker."""
    conn = await _connect(citus_url)
    try:
        dim = await conn.fetchval("""SELECT atttypmod FROM pg_attribute
            WHERE attrelid = 'memory'::regclass AND attname = 'embedding'""")
        sql, params = _statements(7, dim)[statement]
        numbered, args = _numbered(sql, params)
        plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {numbered}", *args))
    finally:
        await conn.close()
    top = plan[0]["Plan"]
    assert (top["Node Type"], top.get("Custom Plan Provider")) == ("Custom Scan", "Citus Adaptive")
    assert _task_counts(plan) == [1]
