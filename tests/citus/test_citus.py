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
    # As the engine's connections (app/db/engine.py): each statement planned for its values.
    return await asyncpg.connect(
        host=u.host, port=u.port, user=u.username, database=u.database,
        server_settings={"plan_cache_mode": "force_custom_plan"},
    )  # fmt: skip


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
    # 0033 gave working_memory_item its namespace_id and distributed it; 0034 made
    # working_memory_change, distributed.
    assert distributed == set(m0031.DISTRIBUTED) | {"working_memory_item", "working_memory_change"}
    assert reference == set(m0031.REFERENCE) | set(m0031.NO_NAMESPACE_COLUMN) - {
        "working_memory_item"
    }
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


def _found(plan: Any, key: str) -> list[str]:
    """Every value of `key` (an index's or a relation's name) in a plan, the workers' too."""
    found: list[str] = []
    if isinstance(plan, dict):
        for name, value in plan.items():
            found += [value] if name == key else _found(value, key)
    elif isinstance(plan, list):
        for item in plan:
            found += _found(item, key)
    return found


# Enough embedded memories in the namespace that the shard's planner prefers its HNSW index
# to a scan and sort (at 1,000 it still scanned; at 2,000 it took the index).
PLANNED_MEMORIES = 2000


@pytest.fixture(scope="module")
async def planned(citus_url: str) -> tuple[int, int]:
    """A namespace of PLANNED_MEMORIES ready memories, analyzed (random vectors; one memory
    in 100 names a walrus, so the text index is selective): its id, and the id of the memory
    shard that holds it."""
    conn = await _connect(citus_url)
    try:
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('planned') RETURNING id")
        robot = await conn.fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'r') RETURNING id", ns
        )
        dim, storage = await conn.fetchrow("""
            SELECT atttypmod, format_type(atttypid, NULL) FROM pg_attribute
            WHERE attrelid = 'memory'::regclass AND attname = 'embedding'""")
        await conn.execute(
            f"""INSERT INTO memory (namespace_id, key, content, author_robot_id, token_count,
                                    embedding, embedding_status)
            SELECT CAST($1 AS bigint), 'k' || g, 'memory number ' || g
                   || CASE WHEN g % 100 = 0 THEN ' about a walrus' ELSE '' END,
                   CAST($2 AS bigint), 6,
                   (SELECT CAST(array_agg(random() - 0.5) AS {storage})
                    FROM generate_series(1, CAST($3 AS int)) d WHERE g > 0), 'ready'
            FROM generate_series(1, CAST($4 AS int)) g""",
            ns, robot, dim, PLANNED_MEMORIES,
        )  # fmt: skip
        await conn.execute("ANALYZE memory")
        shard = await conn.fetchval(
            "SELECT get_shard_id_for_distribution_column('memory', CAST($1 AS bigint))", ns
        )
    finally:
        await conn.close()
    return ns, shard


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        ("vector-hnsw", "memory_embedding_hnsw"),
        ("vector-exact", None),  # the namespace's rows sorted by distance: no vector index
        ("fulltext", "memory_search_tsv"),
    ],
)
async def test_a_recall_statement_in_one_namespace_is_one_router_task_on_its_shard(
    citus_url: str, planned: tuple[int, int], statement: str, index: str | None
) -> None:
    """The whole statement, its CTEs and its joins back to memory (each names the namespace:
    app.recall.statements.same_memory), goes to the namespace's shard as one task of the
    router executor; robot and memory_access, reference tables, join on that worker. The
    search itself uses the shard's own index."""
    ns, shard = planned
    conn = await _connect(citus_url)
    try:
        dim = await conn.fetchval("""SELECT atttypmod FROM pg_attribute
            WHERE attrelid = 'memory'::regclass AND attname = 'embedding'""")
        sql, params = _statements(ns, dim)[statement]
        numbered, args = _numbered(sql, params)
        plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {numbered}", *args))
    finally:
        await conn.close()
    top = plan[0]["Plan"]
    assert (top["Node Type"], top.get("Custom Plan Provider")) == ("Custom Scan", "Citus Adaptive")
    assert _task_counts(plan) == [1]
    # Every scan of memory is of the namespace's shard, and the search uses that shard's index.
    shards = {r for r in _found(plan, "Relation Name") if re.fullmatch(r"memory_\d+", r)}
    assert shards == {f"memory_{shard}"}
    indexes = _found(plan, "Index Name")
    hnsw = {f"memory_embedding_hnsw_{shard}"} if index == "memory_embedding_hnsw" else set()
    assert {i for i in indexes if "hnsw" in i} == hnsw
    if index is not None:
        assert f"{index}_{shard}" in indexes


# --- through the API: what each request sends, planned on the cluster ----------------------


class Seen(list[tuple[str, tuple[Any, ...]]]):
    """The statements a connection sent, and the notices it received (`notices`: message and
    detail; with citus.log_remote_commands on, the commands the coordinator sent workers)."""

    def __init__(self) -> None:
        super().__init__()
        self.notices: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def citus_app(citus_url: str, redis_url: str):  # type: ignore[no-untyped-def]
    """`async with citus_app() as (client, seen)`: the app on the cluster's coordinator, in a
    fresh namespace; `seen` (Seen) collects every statement its connections send, with its bind
    values (asyncpg's query logger, added as the pool opens each connection)."""
    import contextlib

    import httpx
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    from app.main import create_app
    from tests.conftest import make_settings

    @contextlib.asynccontextmanager
    async def make() -> Any:
        seen = Seen()

        def log(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.driver_connection.add_query_logger(
                lambda q: seen.append((q.query, tuple(q.args)))
            )
            dbapi_connection.driver_connection.add_log_listener(
                lambda _c, m: seen.notices.append((m.message, m.detail or ""))
            )

        event.listen(Pool, "connect", log)
        try:
            app = create_app(make_settings(citus_url, redis_url), background=False)
            async with app.router.lifespan_context(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://htm") as c:
                    c.headers["X-Namespace"] = f"citus-{uuid.uuid4().hex[:10]}"
                    yield c, seen
        finally:
            event.remove(Pool, "connect", log)

    return make


def _literal(value: Any) -> str:
    """A bind value as an SQL literal (what _inlined puts in its place)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        items = ",".join(
            "NULL" if v is None else '"' + (str(v).lower() if isinstance(v, bool) else str(v)) + '"'
            for v in value
        )
        return "'{" + items + "}'"
    return "'" + str(value).replace("'", "''") + "'"


def _inlined(sql: str, args: tuple[Any, ...]) -> str:
    """The statement with its bind values written in: Citus cannot EXPLAIN an INSERT ... SELECT
    from unnest($n) with parameters ("parameters in SQL functions"), though it runs it."""
    for n in range(len(args), 0, -1):
        sql = sql.replace(f"${n}", _literal(args[n - 1]))
    return sql


async def _tasks_of(
    url: str, statements: list[tuple[str, tuple[Any, ...]]], *, inline: bool = False
) -> list[list[int]]:
    """Each statement's Citus task counts, from EXPLAIN with its own bind values (written
    into the statement with `inline`)."""
    conn = await _connect(url)
    found = []
    try:
        for sql, args in statements:
            explain = f"EXPLAIN (FORMAT JSON) {_inlined(sql, args) if inline else sql}"
            try:
                plan = json.loads(await conn.fetchval(explain, *(() if inline else args)))
            except asyncpg.PostgresError as exc:
                raise AssertionError(f"{exc}: {sql}") from exc
            found.append(_task_counts(plan))
    finally:
        await conn.close()
    return found


def _searches(seen: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements that search the namespace's memories (recall.statements, and the
    planner's count of the eligible ones)."""
    return [(q, a) for q, a in seen if re.search(r"FROM memory m\s+WHERE m\.namespace_id", q)]


def _shards_written(notices: list[tuple[str, str]]) -> dict[str, set[tuple[str, str]]]:
    """ "VERB table" -> the (shard, worker) pairs the coordinator sent it to (citus.log_remote_
    commands: "issuing INSERT INTO public.memory_key_102033 ...", "issuing COPY
    public.memory_102040 ...", "issuing UPDATE public.robot_102009 ...", detail "on server
    ...:port")."""
    found: dict[str, set[tuple[str, str]]] = {}
    for message, detail in notices:
        m = re.match(
            r"issuing (INSERT INTO|COPY|UPDATE|DELETE FROM) public\.([a-z_]+)_(\d+)\b", message
        )
        if m:
            port = re.search(r":(\d+)", detail)
            verb = m[1].split()[0]
            found.setdefault(f"{verb} {m[2]}", set()).add((m[3], port[1] if port else "?"))
    return found


async def _add_and_recall(citus_url: str, citus_app: Any) -> tuple[Any, Any, Any]:
    """One add and a vector, full-text and hybrid recall: the shards the add wrote (each
    table's), each recall's hits and the statements that searched."""
    vec = [1.0] + [0.0] * 383
    database = make_url(citus_url).database
    conn = await _connect(citus_url)
    await conn.execute(f'ALTER DATABASE "{database}" SET citus.log_remote_commands = on')
    try:
        async with citus_app() as (client, seen):
            r = await client.post(
                "/v1/robots/r1/memories",
                json={"key": "walrus", "content": "the walrus sat on the ice", "embedding": vec},
            )
            assert r.status_code == 201, r.text
            written = _shards_written(seen.notices)
            namespace = client.headers["X-Namespace"]
    finally:
        await conn.execute(f'ALTER DATABASE "{database}" RESET citus.log_remote_commands')
        await conn.close()
    async with citus_app() as (client, seen):
        client.headers["X-Namespace"] = namespace
        found: dict[str, list[str]] = {}
        searches: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
        for strategy in ("vector", "fulltext", "hybrid"):
            r = await client.post(
                "/v1/robots/r1/recall",
                json={"query": "walrus", "embedding": vec, "strategy": strategy},
            )
            assert r.status_code == 200, r.text
            found[strategy] = [h["key"] for h in r.json()["hits"]]
            searches[strategy] = _searches(seen)
            seen.clear()
    return written, found, searches


async def test_an_add_through_the_api_writes_one_shard_and_each_recall_finds_it(
    citus_url: str, citus_app: Any
) -> None:
    written, found, _ = await _add_and_recall(citus_url, citus_app)
    assert found == {"vector": ["walrus"], "fulltext": ["walrus"], "hybrid": ["walrus"]}
    # The add's key, event and memory, and its placement's working-memory rows, each went to
    # one shard, all on one worker (the namespace's: co-located). A new namespace and robot
    # are rows of reference tables, written on every worker; the placement writes no robot
    # (migration 0034: its lock and record are its working_memory_change row).
    assert sorted(written) == [
        "COPY memory",
        "COPY memory_event",
        "DELETE working_memory_item",
        "INSERT memory_key",
        "INSERT namespace",
        "INSERT robot",
        "INSERT working_memory_change",
        "INSERT working_memory_item",
        "UPDATE working_memory_change",
        "UPDATE working_memory_item",
    ], written
    reference = ("INSERT namespace", "INSERT robot")
    assert all(len(written[t]) == 1 for t in written if t not in reference), written
    assert len({port for t in written if t not in reference for _, port in written[t]}) == 1
    assert all(len({port for _, port in written[t]}) == 2 for t in reference), written


async def test_each_recall_through_the_api_searches_as_one_router_task(
    citus_url: str, citus_app: Any
) -> None:
    _, _, searches = await _add_and_recall(citus_url, citus_app)
    for strategy, statements in searches.items():
        assert statements, strategy
        assert await _tasks_of(citus_url, statements) == [[1]] * len(statements), strategy


async def test_the_list_answers_on_citus_as_one_router_task(citus_url: str, citus_app: Any) -> None:
    """The list of a robot's memories, newest first: its statement (the memory's columns with
    its successor's key and pool's name, each subquery naming the namespace as a value:
    app.memories.read_repository) is one task on the namespace's shard."""
    async with citus_app() as (client, seen):
        for key in ("a", "b"):
            r = await client.post("/v1/robots/r1/memories", json={"key": key, "content": key})
            assert r.status_code == 201, r.text
        seen.clear()
        listed = await client.get("/v1/robots/r1/memories")
        lists = [(q, a) for q, a in seen if "ORDER BY m.created_at DESC, m.id DESC" in q]
    assert listed.status_code == 200, listed.text
    assert [m["key"] for m in listed.json()["items"]] == ["b", "a"]
    assert len(lists) == 1
    assert await _tasks_of(citus_url, lists) == [[1]]


async def test_stats_answer_on_citus_and_the_working_memory_lock_and_read_are_router_tasks(
    citus_url: str, citus_app: Any
) -> None:
    """The stats answer, their counter read one task. Each add's placement takes the robot's
    working-memory lock (its working_memory_change row, and the memories to place, FOR KEY
    SHARE; tried twice at the robot's first change, around making that row) and, the robot's
    first change, rebuilds it from the mirror (its members read with their memories): each
    of those statements names the namespace and is one task."""
    async with citus_app() as (client, seen):
        for key in ("a", "b"):
            r = await client.post("/v1/robots/r1/memories", json={"key": key, "content": key})
            assert r.status_code == 201, r.text
        locks = [(q, a) for q, a in seen if "FOR KEY SHARE OF m" in q]
        reads = [(q, a) for q, a in seen if re.search(r"JOIN memory m ON m.namespace_id = \$1", q)
                 and "FROM working_memory_item w" in q]  # fmt: skip
        seen.clear()
        stats = await client.get("/v1/stats")
        counters = [(q, a) for q, a in seen if "FROM namespace_memory_count" in q]
    assert stats.status_code == 200, stats.text
    assert stats.json()["memories"] == 2
    assert counters and await _tasks_of(citus_url, counters) == [[1]] * len(counters)
    assert len(locks) == 3  # one per add, the first tried twice
    assert await _tasks_of(citus_url, locks) == [[1], [1], [1]]
    assert reads and await _tasks_of(citus_url, reads) == [[1]] * len(reads)


async def test_a_recall_loads_its_hits_into_working_memory_on_citus(
    citus_url: str, citus_app: Any
) -> None:
    """working_memory_item is distributed by namespace (migration 0033), so the robot's first
    change (a rebuild), a recall's placement, a forget's withdrawal and the context read all
    work on Citus, and every statement that touches the mirror is one task on the
    namespace's shard (app/working_memory/repository.py names the namespace in each)."""
    async with citus_app() as (client, seen):
        r = await client.post(
            "/v1/robots/r1/memories", json={"key": "walrus", "content": "the walrus"}
        )
        assert r.status_code == 201, r.text
        r = await client.post(
            "/v1/robots/r1/recall",
            json={"query": "walrus", "strategy": "fulltext", "wait_for_working_memory": True},
        )
        assert r.status_code == 200, r.text
        assert r.json()["working_memory"]["loaded"] == ["walrus"]
        held = await client.get("/v1/robots/r1/working-memory")
        assert held.status_code == 200, held.text
        assert [i["key"] for i in held.json()["items"]] == ["walrus"]
        r = await client.delete("/v1/robots/r1/memories/walrus")
        assert r.status_code == 200, r.text
        held = await client.get("/v1/robots/r1/working-memory")
        assert [i["key"] for i in held.json()["items"]] == []
        mirror = [(q, a) for q, a in seen if "working_memory_item" in q]
    # The placement's record, the withdrawal's, and the reads of the members.
    for written in ("INSERT INTO working_memory_item", "UPDATE working_memory_item"):
        assert any(written in q for q, _ in mirror), written
    assert any("FROM working_memory_item w" in q for q, _ in mirror)
    counts = await _tasks_of(citus_url, mirror, inline=True)
    assert [c for c in counts if set(c) != {1}] == []


# --- a worker lost (issue 50, item 3) --------------------------------------------------------


async def _worker_of(url: str, namespace: str) -> int | None:
    """The port of the worker holding `namespace`'s shard of memory (None: not created yet)."""
    conn = await _connect(url)
    try:
        return await conn.fetchval(
            """SELECT n.nodeport FROM namespace s
               JOIN pg_dist_placement p
                 ON p.shardid = get_shard_id_for_distribution_column('memory', s.id)
               JOIN pg_dist_node n ON n.groupid = p.groupid
               WHERE s.name = $1""",
            namespace,
        )
    finally:
        await conn.close()


async def test_a_worker_lost_answers_503_for_what_needs_it_and_loses_nothing(
    cluster: Cluster, citus_url: str, citus_app: Any
) -> None:
    """One worker stopped (immediate) under writes and recalls in two namespaces, one on each
    worker: nothing answers 500; the namespace on the stopped worker answers 503
    problem+json to each add and recall; the other keeps serving both (its adds are
    statements that each go only to its shard: MemoryRepository.add `apart`; its robot,
    last seen over a minute ago, is served without last_seen_at written); with the
    worker back, every acknowledged add is there and no refused one is. Runs last in this
    module: it stops and starts a worker of the module's cluster."""
    async with citus_app() as (client, _seen):
        ports: dict[int, str] = {}
        for _ in range(40):  # a namespace on each worker (8 shards over 2 workers)
            ns = f"loss-{uuid.uuid4().hex[:8]}"
            r = await client.post(
                "/v1/robots/r1/memories",
                json={"key": "before", "content": "written before the loss"},
                headers={"X-Namespace": ns},
            )
            assert r.status_code == 201, r.text
            ports.setdefault(await _worker_of(citus_url, ns), ns)  # type: ignore[arg-type]
            if len(ports) == 2:
                break
        assert len(ports) == 2, ports
        lost_port = cluster.workers[1].port
        lost, kept = ports[lost_port], next(n for p, n in ports.items() if p != lost_port)
        acknowledged: dict[str, list[str]] = {kept: ["before"], lost: ["before"]}
        statuses: dict[str, list[int]] = {kept: [], lost: []}
        # The robots last seen over a minute ago, and not cached: each request's registration
        # then tries to write last_seen_at, a reference table's row, which needs every node
        # (RobotRepository._seen: best effort, under a savepoint).
        conn = await _connect(citus_url)
        await conn.execute("UPDATE robot SET last_seen_at = now() - interval '2 minutes'")
        await conn.close()
        client._transport.app.state.components.two_tier.robots.clear()
        cluster.workers[1].stop("immediate")
        try:
            for ns in (kept, lost):
                h = {"X-Namespace": ns}
                for i in range(3):
                    r = await client.post(
                        "/v1/robots/r1/memories",
                        json={"key": f"during-{i}", "content": f"written during the loss {i}"},
                        headers=h,
                    )
                    statuses[ns].append(r.status_code)
                    if r.status_code == 201:
                        acknowledged[ns].append(f"during-{i}")
                    else:
                        assert r.headers["content-type"] == "application/problem+json"
                r = await client.post(
                    "/v1/robots/r1/recall",
                    json={"query": "written", "strategy": "fulltext", "limit": 10},
                    headers=h,
                )
                statuses[ns].append(r.status_code)
        finally:
            cluster.workers[1].start()
        assert statuses[lost] == [503, 503, 503, 503]
        assert statuses[kept] == [201, 201, 201, 200]
        for ns in (kept, lost):
            r = await client.get("/v1/robots/r1/memories", headers={"X-Namespace": ns})
            assert r.status_code == 200, r.text
            assert sorted(m["key"] for m in r.json()["items"]) == sorted(acknowledged[ns])
