"""TimescaleDB: hypertables, chunk exclusion, time_bucket activity and version reporting.

These tests run only when the test server offers the timescaledb extension and preloads it
(HTM_TEST_DATABASE_URL pointing at a TimescaleDB server); elsewhere they skip, saying why.
The embedded pgserver PostgreSQL has no TimescaleDB, so `make test` on a fresh machine skips
them, and the rest of the suite covers the plain-table path.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
import tiktoken
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.config import PROJECT_ROOT, Settings, get_settings
from app.db.session import DbSession
from app.db.sql import vector_text
from app.recall.planner import TextPlan
from app.recall.query import SearchFilters, where
from app.recall.statements import nearest as nearest_sql
from app.recall.statements import text_ctes

pytestmark = [pytest.mark.timescaledb, pytest.mark.usefixtures("timescaledb")]


def _migration(number: str) -> Any:
    path = next((PROJECT_ROOT / "alembic" / "versions").glob(f"*_{number}_*.py"))
    spec = importlib.util.spec_from_file_location(f"htm_test_migration_{number}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


M0024 = _migration("0024")
MEMORY_CHUNK_DAYS: int = M0024.MEMORY_CHUNK_DAYS


async def _connect(url: str) -> asyncpg.Connection:
    u = make_url(url)
    return await asyncpg.connect(
        user=u.username, password=u.password, host=u.query.get("host") or u.host,
        port=u.port, database=u.database or "postgres",
    )  # fmt: skip


@pytest.fixture(scope="session")
async def timescaledb(server_url: str) -> str:
    """The timescaledb version the test server offers; skips when it cannot be used."""
    conn = await _connect(server_url)
    try:
        available = await conn.fetchval(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'timescaledb'"
        )
        # The loader, once preloaded, defines this postmaster-level setting. Unlike
        # shared_preload_libraries it is readable without pg_read_all_settings.
        preloaded = await conn.fetchval(
            "SELECT current_setting('timescaledb.max_background_workers', true) IS NOT NULL"
        )
    finally:
        await conn.close()
    if not available:
        pytest.skip(
            "timescaledb is not available on the test server (pg_available_extensions); "
            "point HTM_TEST_DATABASE_URL at a PostgreSQL with TimescaleDB to run these tests"
        )
    if not preloaded:
        pytest.skip(
            f"timescaledb {available} is installed on the test server but not preloaded "
            "(shared_preload_libraries), so no database can create the extension"
        )
    return str(available)


@pytest.fixture(scope="session")
def ts_url(timescaledb: str, request: pytest.FixtureRequest) -> str:
    """The session's migrated database, requested only once TimescaleDB is known usable."""
    return str(request.getfixturevalue("database_url"))


@pytest.fixture(scope="session")
def ts_app_factory(ts_url: str, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return request.getfixturevalue("app_factory")


@pytest.fixture(scope="module")
async def engine(ts_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(ts_url, connect_args={"server_settings": {"jit": "off"}})
    yield engine
    await engine.dispose()


@pytest.fixture
async def session(engine: AsyncEngine) -> AsyncIterator[DbSession]:
    """One transaction, rolled back: rows and the chunks they created disappear with it."""
    async with DbSession(engine) as s:
        yield s
        await s.rollback()


# --- (a) the migration's hypertables -------------------------------------------------------


async def test_migration_made_memory_and_memory_event_hypertables_with_the_chunk_interval(
    session: DbSession, timescaledb: str
) -> None:
    installed = (
        await session.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
        )
    ).scalar_one()
    assert installed == timescaledb

    # 0001 read the chunk interval from the settings; the default is a week. 0024 gave
    # memory, where it had that default, chunks of MEMORY_CHUNK_DAYS: ten years, one chunk
    # (an HNSW index per chunk measured slower: bench/results/2026-11-27-timescaledb.md).
    assert Settings.model_fields["hypertable_chunk_interval"].default == "7 days"
    configured = get_settings().hypertable_chunk_interval
    interval = (
        await session.execute(text("SELECT CAST(CAST(:c AS text) AS interval)"), {"c": configured})
    ).scalar_one()
    memory_interval = interval
    if configured == "7 days":
        assert interval == timedelta(days=7)
        memory_interval = timedelta(days=MEMORY_CHUNK_DAYS)

    dims = (
        await session.execute(
            text("""
            SELECT hypertable_name, column_name, dimension_type, time_interval
            FROM timescaledb_information.dimensions
            WHERE hypertable_schema = 'public'
            ORDER BY hypertable_name, dimension_number""")
        )
    ).all()
    assert [tuple(d) for d in dims] == [
        ("memory", "created_at", "Time", memory_interval),
        ("memory_event", "at", "Time", interval),
    ]
    tables = (
        await session.execute(
            text("""SELECT hypertable_name FROM timescaledb_information.hypertables
                    WHERE hypertable_schema = 'public' ORDER BY 1""")
        )
    ).scalars()
    assert list(tables) == ["memory", "memory_event"]


async def test_every_unique_constraint_on_a_hypertable_includes_its_time_column(
    session: DbSession,
) -> None:
    rows = (
        await session.execute(
            text("""
            SELECT c.conrelid::regclass::text AS tbl, c.conname,
                   array_agg(a.attname::text ORDER BY a.attname) AS cols
            FROM pg_constraint c
            JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
            WHERE c.contype IN ('p', 'u') AND c.conrelid IN ('memory'::regclass,
                                                           'memory_event'::regclass)
            GROUP BY 1, 2 ORDER BY 1, 2""")
        )
    ).all()
    assert [(r.tbl, sorted(r.cols)) for r in rows] == [
        ("memory", ["created_at", "id"]),
        ("memory_event", ["at", "id"]),
    ]


# --- (b) chunk exclusion for the recall statements ----------------------------------------

BASE = datetime(2019, 3, 4, 12, tzinfo=UTC)  # no other test writes memories near 2019
WEEKS = 10


def _relations(plan: Any) -> set[str]:
    """Every relation a JSON plan scans (chunks appear under their own names)."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.add(plan["Relation Name"])
        for value in plan.values():
            found |= _relations(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= _relations(item)
    return found


def _executed(plan: Any) -> set[str]:
    """The relations an EXPLAIN ANALYZE plan actually scanned (loops > 0); TimescaleDB's
    ChunkAppend node names the hypertable itself but only its children scan anything."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if (
            "Relation Name" in plan
            and plan.get("Actual Loops", 0) > 0
            and plan.get("Custom Plan Provider") != "ChunkAppend"
        ):
            found.add(plan["Relation Name"])
        for value in plan.values():
            found |= _executed(value)
    elif isinstance(plan, list):
        for item in plan:
            found |= _executed(item)
    return found


def _literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        raise TypeError(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'"
    if isinstance(value, list):
        return "'{" + ",".join(repr(float(v)) for v in value) + "}'"
    return "'" + str(value).replace("'", "''") + "'"


def _excluded_at_startup(plan: Any) -> int:
    if isinstance(plan, dict):
        own = plan.get("Chunks excluded during startup", 0)
        return own + sum(_excluded_at_startup(v) for v in plan.values())
    if isinstance(plan, list):
        return sum(_excluded_at_startup(v) for v in plan)
    return 0


def _as_json(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str) else raw


class TenWeeks:
    def __init__(self, session: DbSession, namespace_id: int, dim: int) -> None:
        self.session = session
        self.namespace_id = namespace_id
        self.dim = dim

    async def chunks(self, start: datetime | None = None, end: datetime | None = None) -> set[str]:
        """memory's chunks (from the catalog) whose range overlaps [start, end)."""
        rows = await self.session.execute(
            text("""
            SELECT chunk_name FROM timescaledb_information.chunks
            WHERE hypertable_schema = 'public' AND hypertable_name = 'memory'
              AND (CAST(:start AS timestamptz) IS NULL OR range_end > :start)
              AND (CAST(:end AS timestamptz) IS NULL OR range_start < :end)"""),
            {"start": start, "end": end},
        )
        return set(rows.scalars())

    async def chunk_ranges(self) -> list[tuple[str, datetime, datetime]]:
        rows = await self.session.execute(
            text("""
            SELECT chunk_name, range_start, range_end FROM timescaledb_information.chunks
            WHERE hypertable_schema = 'public' AND hypertable_name = 'memory'
              AND range_start >= :start AND range_end <= :end
            ORDER BY range_start"""),
            {"start": BASE, "end": BASE + timedelta(weeks=WEEKS)},
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def statements(self, start: datetime | None, end: datetime | None) -> dict[str, tuple]:
        """The recall repository's own filtered statements: vector (index and exact) and
        full text, with the created_at range exactly as recall passes a timeframe."""
        eligible = where(self.namespace_id, SearchFilters(start=start, end=end))
        qvec = vector_text([1.0] + [0.0] * (self.dim - 1))
        out: dict[str, tuple] = {}
        for name, exact in (("vector-hnsw", False), ("vector-exact", True)):
            params: dict[str, Any] = {"qvec": qvec, "vec_n": 5, **eligible.params}
            out[name] = (nearest_sql(eligible.sql, exact, "vector"), params)
        plan = TextPlan(all_q="'walrus'", rare_q=None, common_q=None)
        params = {"all_q": plan.all_q, "text_n": 5, **eligible.params}
        ctes = text_ctes(eligible.sql, plan)
        out["fulltext"] = (f"WITH {ctes} SELECT * FROM text_hits", params)
        return out

    async def planned(self, sql: str, params: dict[str, Any]) -> set[str]:
        raw = (await self.session.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params)).scalar()
        return _relations(_as_json(raw))

    async def executed_with_a_generic_plan(
        self, sql: str, params: dict[str, Any]
    ) -> tuple[set[str], int]:
        """As a cached prepared statement runs after its first executions: planned without
        the parameter values, so exclusion must happen when the executor starts."""
        names = [n for n in params if re.search(rf":{n}\b", sql)]
        numbered = sql
        for i, name in enumerate(names, start=1):
            numbered = re.sub(rf":{name}\b", f"${i}", numbered)
        params = {n: params[n] for n in names}
        stmt = f"htm_ts_{uuid.uuid4().hex[:8]}"
        await self.session.execute(text(f"PREPARE {stmt} AS {numbered}"))
        await self.session.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        # EXPLAIN takes no bind parameters: EXECUTE gets literals, typed by the PREPARE.
        args = ", ".join(_literal(params[name]) for name in names)
        raw = (
            await self.session.execute(
                text(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {stmt}({args})")
            )
        ).scalar()
        await self.session.execute(text(f"DEALLOCATE {stmt}"))
        await self.session.execute(text("SET LOCAL plan_cache_mode = auto"))
        plan = _as_json(raw)
        return _executed(plan), _excluded_at_startup(plan)


@pytest.fixture
async def ten_weeks(session: DbSession) -> TenWeeks:
    """One memory per day at noon for ten weeks, inserted with SQL in the test's transaction,
    in weekly chunks (as 0001 made them; 0024 made memory's longer): a week's timeframe is
    then exactly one chunk. The interval goes back with the transaction's rollback."""
    await session.execute(text("SELECT set_chunk_time_interval('memory', INTERVAL '7 days')"))
    dim = (
        await session.execute(
            text("""SELECT atttypmod FROM pg_attribute
                    WHERE attrelid = 'memory'::regclass AND attname = 'embedding'""")
        )
    ).scalar_one()
    ns = (
        await session.execute(
            text("INSERT INTO namespace (name) VALUES (:n) RETURNING id"),
            {"n": f"ts-{uuid.uuid4().hex[:12]}"},
        )
    ).scalar_one()
    robot = (
        await session.execute(
            text("INSERT INTO robot (namespace_id, name) VALUES (:ns, 'chunky') RETURNING id"),
            {"ns": ns},
        )
    ).scalar_one()
    vector = "[" + ",".join(["1"] + ["0"] * (dim - 1)) + "]"
    await session.execute(
        text("""
        INSERT INTO memory (created_at, namespace_id, key, content, author_robot_id,
                            token_count, embedding, embedding_status)
        SELECT CAST(:base AS timestamptz) + d * interval '1 day', :ns, 'day-' || d,
               'walrus sighting number ' || d, :robot, 4, CAST(:vec AS vector), 'ready'
        FROM generate_series(0, :days - 1) AS d"""),
        {"base": BASE, "ns": ns, "robot": robot, "vec": vector, "days": 7 * WEEKS},
    )
    return TenWeeks(session, ns, dim)


async def test_ten_weeks_of_memories_span_weekly_chunks_each_with_every_index(
    ten_weeks: TenWeeks,
) -> None:
    inside = await ten_weeks.chunk_ranges()
    assert len(inside) >= WEEKS - 1  # chunks are aligned to the epoch, not to BASE
    assert all(end - start == timedelta(days=7) for _, start, end in inside)
    overlapping = await ten_weeks.chunks(BASE, BASE + timedelta(weeks=WEEKS))
    assert len(overlapping) in (WEEKS, WEEKS + 1)
    # Indexes made on the hypertable exist on each chunk: HNSW and GIN included.
    for chunk in sorted(overlapping):
        defs = (
            await ten_weeks.session.execute(
                text("SELECT indexdef FROM pg_indexes WHERE tablename = :t"), {"t": chunk}
            )
        ).scalars()
        methods = {d.split(" USING ")[1].split(" ")[0] for d in defs}
        assert methods == {"btree", "hnsw", "gin"}, chunk


@pytest.mark.parametrize("statement", ["vector-hnsw", "vector-exact", "fulltext"])
async def test_a_one_week_timeframe_plans_only_the_chunks_overlapping_that_week(
    ten_weeks: TenWeeks, statement: str
) -> None:
    everything = await ten_weeks.chunks()
    _, start, end = (await ten_weeks.chunk_ranges())[4]

    # A week that is exactly one chunk: that chunk alone.
    sql, params = ten_weeks.statements(start, end)[statement]
    chunk = await ten_weeks.chunks(start, end)
    assert len(chunk) == 1
    assert await ten_weeks.planned(sql, params) == chunk

    # A week straddling two chunks (mid-chunk to mid-chunk): those two only.
    shifted = start + timedelta(days=3, hours=5)
    sql, params = ten_weeks.statements(shifted, shifted + timedelta(days=7))[statement]
    pair = await ten_weeks.chunks(shifted, shifted + timedelta(days=7))
    assert len(pair) == 2 and chunk < pair
    assert await ten_weeks.planned(sql, params) == pair

    # Without a timeframe every chunk of memory is planned: the check above can fail.
    sql, params = ten_weeks.statements(None, None)[statement]
    assert len(everything) > WEEKS
    assert await ten_weeks.planned(sql, params) == everything


@pytest.mark.parametrize("statement", ["vector-hnsw", "vector-exact", "fulltext"])
async def test_a_generic_plan_still_scans_only_that_weeks_chunks(
    ten_weeks: TenWeeks, statement: str
) -> None:
    _, start, _ = (await ten_weeks.chunk_ranges())[6]
    shifted = start + timedelta(days=2)
    sql, params = ten_weeks.statements(shifted, shifted + timedelta(days=7))[statement]

    everything = await ten_weeks.chunks()

    scanned, excluded = await ten_weeks.executed_with_a_generic_plan(sql, params)

    assert scanned == await ten_weeks.chunks(shifted, shifted + timedelta(days=7))
    assert len(scanned) == 2
    # Not planned away (the plan knows no dates): ChunkAppend skips them as it starts.
    assert excluded == len(everything) - 2


async def test_a_one_week_timeframe_finds_exactly_that_weeks_memories(
    ten_weeks: TenWeeks,
) -> None:
    _, start, end = (await ten_weeks.chunk_ranges())[3]
    sql, params = ten_weeks.statements(start, end)["fulltext"]
    params = {**params, "text_n": 100}
    rows = (await ten_weeks.session.execute(text(sql), params)).all()
    days = sorted(r.created_at for r in rows)
    assert len(days) == 7
    assert all(start <= d < end for d in days)


# --- (c) versions and hypertables through the API -----------------------------------------


@pytest.fixture
def ns() -> str:
    return f"ts-{uuid.uuid4().hex[:12]}"


async def test_readyz_and_namespace_stats_report_timescaledb(
    ts_app_factory, timescaledb: str, ns: str
) -> None:
    async with ts_app_factory() as client:
        client.headers["X-Namespace"] = ns
        ready = await client.get("/readyz")
        stats = await client.get("/v1/stats")
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"
    assert ready.json()["timescaledb"] == timescaledb
    assert stats.status_code == 200, stats.text
    assert stats.json()["hypertables"] == ["memory", "memory_event"]
    assert stats.json()["versions"]["timescaledb"] == timescaledb


# --- (d) activity per day: the time_bucket path --------------------------------------------

ENC = tiktoken.get_encoding("cl100k_base")
DAY1 = datetime(2032, 3, 1, 23, 50, tzinfo=UTC)
DAY2 = datetime(2032, 3, 2, 0, 5, tzinfo=UTC)  # 15 minutes later, the next UTC day
DAY4 = datetime(2032, 3, 4, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


def text_of(tokens: int, word: str) -> str:
    content = word + " apple" * (tokens - len(ENC.encode(word)))
    assert len(ENC.encode(content)) == tokens
    return content


@pytest.fixture
async def client(ts_app_factory, ns: str) -> AsyncIterator[httpx.AsyncClient]:
    async with ts_app_factory() as c:
        c.headers["X-Namespace"] = ns
        c.clock = Clock(DAY1)  # type: ignore[attr-defined]
        c.app.state.components.clock.set(c.clock)
        yield c


async def _add(client: httpx.AsyncClient, key: str, word: str) -> dict:
    r = await client.post("/v1/robots/tb/memories", json={"key": key, "content": text_of(10, word)})
    assert r.status_code == 201, r.text
    return r.json()["working_memory"]


@pytest.fixture
async def three_days(client: httpx.AsyncClient) -> None:
    """Robot tb (budget 30, memories of 10 tokens): day 1 two adds; day 2 two adds, the
    second evicting one; day 4 a recall of one memory that evicts another. Day 3: nothing."""
    assert (await client.put("/v1/robots/tb", json={"working_memory_budget": 30})).is_success
    await _add(client, "k1", "walrus")
    await _add(client, "k2", "note")
    client.clock.t = DAY2  # type: ignore[attr-defined]
    await _add(client, "k3", "note")
    assert (await _add(client, "k4", "note"))["evicted"] == ["k1"]
    client.clock.t = DAY4  # type: ignore[attr-defined]
    r = await client.post("/v1/robots/tb/recall", json={"query": "walrus", "strategy": "fulltext"})
    assert r.status_code == 200, r.text
    assert r.json()["working_memory"]["loaded"] == ["k1"]
    assert r.json()["working_memory"]["evicted"] == ["k2"]


async def test_robot_activity_per_utc_day_from_time_bucket(
    client: httpx.AsyncClient, three_days: None, engine: AsyncEngine, ns: str
) -> None:
    # The events sit in memory_event, a hypertable: the stats take the time_bucket path.
    async with engine.connect() as conn:
        events = (
            await conn.execute(
                text("""
                SELECT e.kind, e.at, (SELECT count(*) FROM timescaledb_information.hypertables
                                      WHERE hypertable_name = 'memory_event') AS hyper
                FROM memory_event e JOIN robot r ON r.id = e.robot_id
                JOIN namespace n ON n.id = r.namespace_id
                WHERE n.name = :ns ORDER BY e.at, e.kind"""),
                {"ns": ns},
            )
        ).all()
    assert {e.hyper for e in events} == {1}
    assert sorted((e.at, e.kind) for e in events) == sorted(
        [(DAY1, "add"), (DAY1, "add"), (DAY2, "add"), (DAY2, "add"), (DAY2, "evict"),
         (DAY4, "recall"), (DAY4, "evict")]
    )  # fmt: skip

    r = await client.get("/v1/robots/tb/stats", params={"days": 4})
    assert r.status_code == 200, r.text
    assert r.json()["activity"] == [
        {"day": "2032-03-01", "adds": 2, "recalls": 0, "evictions": 0},
        {"day": "2032-03-02", "adds": 2, "recalls": 0, "evictions": 1},
        {"day": "2032-03-04", "adds": 0, "recalls": 1, "evictions": 1},
    ]
    # The window is the last N days up to the clock's today.
    r = await client.get("/v1/robots/tb/stats", params={"days": 3})
    assert [d["day"] for d in r.json()["activity"]] == ["2032-03-02", "2032-03-04"]
    client.clock.t = DAY2  # type: ignore[attr-defined]
    r = await client.get("/v1/robots/tb/stats", params={"days": 1})
    assert r.json()["activity"] == [{"day": "2032-03-02", "adds": 2, "recalls": 0, "evictions": 1}]


async def test_time_bucket_days_are_utc_whatever_the_session_time_zone(
    client: httpx.AsyncClient, three_days: None, ns: str
) -> None:
    from app.stats.repository import StatsRepository

    async with client.app.state.components.sessionmaker() as s:  # type: ignore[attr-defined]
        # UTC+14: day 1's 23:50 and day 2's 00:05 are both on March 2 local time.
        await s.execute(text("SET LOCAL TIME ZONE 'Pacific/Kiritimati'"))
        repo = StatsRepository(s)
        assert "memory_event" in await repo.hypertables()
        robot_id = (
            await s.execute(
                text("""SELECT r.id FROM robot r JOIN namespace n ON n.id = r.namespace_id
                        WHERE n.name = :ns AND r.name = 'tb'"""),
                {"ns": ns},
            )
        ).scalar_one()
        rows = await repo.activity(
            robot_id,
            since=datetime(2032, 3, 1, tzinfo=UTC),
            until=datetime(2032, 3, 5, tzinfo=UTC),
            timescale=True,
        )
    assert [(r.day.astimezone(UTC), r.adds, r.recalls, r.evictions) for r in rows] == [
        (datetime(2032, 3, 1, tzinfo=UTC), 2, 0, 0),
        (datetime(2032, 3, 2, tzinfo=UTC), 2, 0, 1),
        (datetime(2032, 3, 4, tzinfo=UTC), 0, 1, 1),
    ]


# --- (e) the migration's round trip with hypertables ---------------------------------------


async def test_downgrade_drops_the_hypertables_and_upgrade_recreates_them(
    ts_url: str, database_factory
) -> None:
    from app.db.migrate import downgrade, upgrade

    url = await database_factory()

    async def catalog() -> tuple[list[str], int]:
        conn = await _connect(url)
        try:
            tables = await conn.fetch(
                "SELECT hypertable_name FROM timescaledb_information.hypertables ORDER BY 1"
            )
            chunks = await conn.fetchval("SELECT count(*) FROM timescaledb_information.chunks")
            return [t["hypertable_name"] for t in tables], chunks
        finally:
            await conn.close()

    await asyncio.to_thread(upgrade, url)
    conn = await _connect(url)
    try:
        ns = await conn.fetchval("INSERT INTO namespace (name) VALUES ('x') RETURNING id")
        await conn.execute(
            "INSERT INTO memory_event (namespace_id, kind, at) VALUES ($1, 'add', $2)",
            ns, datetime(2020, 1, 1, tzinfo=UTC),
        )  # fmt: skip
    finally:
        await conn.close()
    assert await catalog() == (["memory", "memory_event"], 1)

    await asyncio.to_thread(downgrade, url, "base")
    assert await catalog() == ([], 0)

    await asyncio.to_thread(upgrade, url)
    assert await catalog() == (["memory", "memory_event"], 0)


# --- (f) the event log: compressed, and a retention that drops only event rows -------------


async def _jobs(url: str) -> dict[str, dict[str, Any]]:
    conn = await _connect(url)
    try:
        rows = await conn.fetch(
            "SELECT job_id, proc_name, config FROM timescaledb_information.jobs "
            "WHERE hypertable_name = 'memory_event'"
        )
    finally:
        await conn.close()
    return {r["proc_name"]: {"job": r["job_id"], **json.loads(r["config"])} for r in rows}


async def test_the_event_log_is_compressed_and_retention_drops_only_event_rows(
    ts_url: str, ts_app_factory: Any
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with ts_app_factory(event_retention_days=90):
        jobs = await _jobs(ts_url)
    assert jobs["policy_compression"]["compress_after"] == "7 days"
    assert jobs["policy_retention"]["drop_after"] == "90 days"

    old = datetime.now(UTC) - timedelta(days=200)
    conn = await _connect(ts_url)
    try:
        ns_id = await conn.fetchval("INSERT INTO namespace (name) VALUES ($1) RETURNING id", ns)
        robot = await conn.fetchval(
            "INSERT INTO robot (namespace_id, name) VALUES ($1, 'r') RETURNING id", ns_id
        )
        await conn.execute(
            "INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at) "
            "VALUES ($1, 'old', 987654321, $2)",
            ns_id, old,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO memory (id, created_at, namespace_id, key, content, author_robot_id, "
            "token_count) VALUES (987654321, $1, $2, 'old', 'an old memory', $3, 3)",
            old, ns_id, robot,
        )  # fmt: skip
        for at in (old, datetime.now(UTC) - timedelta(days=10), datetime.now(UTC)):
            await conn.execute(
                "INSERT INTO memory_event (namespace_id, robot_id, memory_id, kind, at) "
                "VALUES ($1, $2, 987654321, 'add', $3)",
                ns_id, robot, at,
            )  # fmt: skip
        # TimescaleDB's scheduler may be running the policy (it starts when added): a chunk
        # that run is compressing is skipped by another, so the test's run waits for it.
        for _ in range(100):
            running = await conn.fetchval(
                "SELECT count(*) FROM timescaledb_information.job_stats "
                "WHERE job_id = $1 AND job_status = 'Running'",
                jobs["policy_compression"]["job"],
            )
            if not running:
                break
            await asyncio.sleep(0.1)
        await conn.execute(f"CALL run_job({jobs['policy_compression']['job']})")
        compressed = await conn.fetchval(
            "SELECT count(*) FROM timescaledb_information.chunks "
            "WHERE hypertable_name = 'memory_event' AND is_compressed"
        )
        assert compressed >= 2  # the 200- and the 10-day-old events' chunks
        await conn.execute(f"CALL run_job({jobs['policy_retention']['job']})")
        left = await conn.fetch(
            "SELECT at FROM memory_event WHERE namespace_id = $1 ORDER BY at", ns_id
        )
        assert len(left) == 2 and left[0]["at"] > old  # the 200-day-old event is gone
        assert (
            await conn.fetchval("SELECT count(*) FROM memory WHERE namespace_id = $1", ns_id) == 1
        )
        # a compressed chunk still takes writes and answers reads
        await conn.execute(
            "INSERT INTO memory_event (namespace_id, robot_id, kind, at) "
            "VALUES ($1, $2, 'access', $3)",
            ns_id, robot, datetime.now(UTC) - timedelta(days=9),
        )  # fmt: skip
        assert (
            await conn.fetchval("SELECT count(*) FROM memory_event WHERE namespace_id = $1", ns_id)
            == 3
        )
    finally:
        await conn.close()

    async with ts_app_factory():  # unset: the retention policy goes, compression stays
        jobs = await _jobs(ts_url)
    assert sorted(jobs) == ["policy_compression"]


# --- (g) inserts counted per statement on the hypertables ---------------------------------


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("-")[0].split("."))


async def test_the_hypertables_count_inserts_per_statement_from_the_supporting_release(
    session: DbSession, timescaledb: str
) -> None:
    """From TimescaleDB 2.26.4 on, 0024 gives the hypertables 0014's statement triggers
    (transition tables); before it, 0004's row triggers count inserts as they did."""
    assert M0024.TIMESCALEDB_STATEMENT_COUNTS == (2, 26, 4)
    rows = await session.execute(
        text("""
        SELECT c.relname AS tbl, t.tgname,
               (t.tgtype & 1) = 1 AS per_row, (t.tgtype & 4) = 4 AS on_insert,
               t.tgnewtable AS new_table
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relname IN ('memory', 'memory_event') AND NOT t.tgisinternal
          AND t.tgname IN ('memory_count_new', 'memory_count_inserted',
                           'robot_activity_count', 'robot_activity_inserted')
        ORDER BY 1, 2""")
    )
    found = [tuple(r) for r in rows]
    if _version(timescaledb) >= (2, 26, 4):
        assert found == [
            ("memory", "memory_count_inserted", False, True, "inserted"),
            ("memory", "memory_count_new", True, False, None),
            ("memory_event", "robot_activity_count", True, False, None),
            ("memory_event", "robot_activity_inserted", False, True, "inserted"),
        ]
    else:
        assert found == [
            ("memory", "memory_count_new", True, True, None),
            ("memory_event", "robot_activity_count", True, True, None),
        ]


async def test_one_statement_inserting_into_many_chunks_is_counted_exactly(
    session: DbSession,
) -> None:
    """One INSERT of 30 memories spread over 300 days (several chunks of memory, made 30
    days long for it), and one INSERT of 40 events over 4 days (several of memory_event):
    the counters hold each row once, with the bytes read back from the stored rows,
    whichever triggers count them. The interval goes back with the rollback."""
    await session.execute(text("SELECT set_chunk_time_interval('memory', INTERVAL '30 days')"))
    ns = (
        await session.execute(
            text("INSERT INTO namespace (name) VALUES (:n) RETURNING id"),
            {"n": f"ts-{uuid.uuid4().hex[:12]}"},
        )
    ).scalar_one()
    robots = (
        (
            await session.execute(
                text("""INSERT INTO robot (namespace_id, name)
                    SELECT :ns, 'r' || i FROM generate_series(1, 2) i RETURNING id"""),
                {"ns": ns},
            )
        )
        .scalars()
        .all()
    )
    first, second = sorted(robots)
    await session.execute(
        text("""
        INSERT INTO memory (created_at, namespace_id, key, content, type, author_robot_id,
                            token_count)
        SELECT CAST(:base AS timestamptz) + i * interval '10 days', :ns, 'k' || i,
               repeat('counted ', i + 1), CASE WHEN i % 3 = 0 THEN 'goal' ELSE 'fact' END,
               CASE WHEN i < 20 THEN CAST(:a AS bigint) ELSE CAST(:b AS bigint) END, i + 1
        FROM generate_series(0, 29) i"""),
        {"base": datetime(2018, 1, 1, tzinfo=UTC), "ns": ns, "a": first, "b": second},
    )
    chunks = (
        await session.execute(
            text("SELECT count(DISTINCT tableoid) FROM memory WHERE namespace_id = :ns"),
            {"ns": ns},
        )
    ).scalar_one()
    assert chunks >= 10
    per_robot = await session.execute(
        text("""SELECT robot_id, type, sum(memories) AS n FROM robot_memory_count
                WHERE namespace_id = :ns GROUP BY 1, 2 ORDER BY 1, 2"""),
        {"ns": ns},
    )
    # goals: i in 0, 3, ..., 18 (7) for the first robot, 21, 24, 27 (3) for the second
    assert [tuple(r) for r in per_robot] == [
        (first, "fact", 13), (first, "goal", 7), (second, "fact", 7), (second, "goal", 3),
    ]  # fmt: skip
    namespace = (
        await session.execute(
            text("""SELECT sum(memories), sum(deleted), sum(pending), sum(bytes)
                    FROM namespace_memory_count WHERE namespace_id = :ns"""),
            {"ns": ns},
        )
    ).one()
    stored = (
        await session.execute(
            text("""
            SELECT sum(coalesce(pg_column_size(content), 0) + coalesce(pg_column_size(metadata), 0)
                       + coalesce(pg_column_size(tags), 0)
                       + coalesce(pg_column_size(embedding), 0))
            FROM memory WHERE namespace_id = :ns"""),
            {"ns": ns},
        )
    ).scalar_one()
    assert tuple(namespace) == (30, 0, 30, stored)  # no embedding given: pending

    await session.execute(
        text("""
        INSERT INTO memory_event (namespace_id, robot_id, kind, at)
        SELECT :ns, CAST(:a AS bigint), CASE WHEN i % 4 = 0 THEN 'recall' ELSE 'add' END,
               CAST(:base AS timestamptz) + (i % 4) * interval '9 days' + i * interval '1 minute'
        FROM generate_series(0, 39) i"""),
        {"base": datetime(2018, 1, 1, 6, tzinfo=UTC), "ns": ns, "a": first},
    )
    days = await session.execute(
        text("""SELECT day, sum(adds), sum(recalls) FROM robot_activity_day
                WHERE robot_id = :a GROUP BY day ORDER BY day"""),
        {"a": first},
    )
    assert [tuple(r) for r in days] == [
        (datetime(2018, 1, 1).date(), 0, 10),
        (datetime(2018, 1, 10).date(), 10, 0),
        (datetime(2018, 1, 19).date(), 10, 0),
        (datetime(2018, 1, 28).date(), 10, 0),
    ]


# --- (h) a new chunk while robots register ---------------------------------------------------


async def test_concurrent_first_adds_across_a_chunk_boundary_never_deadlock(
    ts_app_factory, ns: str
) -> None:
    """30 new robots each add a first memory at once, dated in a range of `memory` no chunk
    covers yet, by every way an add is stored: the group commit (POST), the request's own
    transaction (a PUT of a new key, an add that asks for a dedupe rule). Creating the chunk
    locks the tables memory's foreign keys reference (robot, namespace) after the hypertable;
    a request that had registered its robot in the transaction that then inserted into the
    new chunk held robot's table lock and waited for the chunk: a deadlock, 503 (20-22 of
    the 30 before the registration committed first: MemoryService._register)."""
    base = datetime(2150 + uuid.uuid4().int % 800, 1, 1, tzinfo=UTC)  # no chunk there yet
    async with ts_app_factory(db_pool_size=40, group_commit_flushes=2) as client:
        client.headers["X-Namespace"] = ns

        async def first_add(i: int) -> httpx.Response:
            robot, key = f"new-{i}", f"k{i}"
            created = (base + timedelta(minutes=i)).isoformat()
            body = {"content": f"memory {i} of robot {i}", "created_at": created}
            if i % 3 == 0:
                return await client.put(f"/v1/robots/{robot}/memories/{key}", json=body)
            if i % 3 == 1:
                body |= {"key": key, "dedupe": "exact"}
            else:
                body |= {"key": key}
            return await client.post(f"/v1/robots/{robot}/memories", json=body)

        answers = await asyncio.gather(*(first_add(i) for i in range(30)))
        assert [(r.status_code, r.text) for r in answers if r.status_code != 201] == []
        r = await client.get("/v1/stats")
        assert r.status_code == 200 and r.json()["memories"] == 30
