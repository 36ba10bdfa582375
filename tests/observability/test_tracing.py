"""OpenTelemetry: the span tree of an add and a recall, pinned with the SDK's in-memory
exporter; a caller's `traceparent` continued; the dependencies' latency in /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(p)  # once a process: the later tests of this worker keep it
    yield
    EXPORTER.shutdown()  # so they keep no spans


def tree(trace_id: str) -> list[str]:
    """The trace's spans, indented by depth, in the order they started."""
    spans: list[ReadableSpan] = [
        s for s in EXPORTER.get_finished_spans() if s.context.trace_id == int(trace_id, 16)
    ]
    by_id = {s.context.span_id: s for s in spans}

    def depth(s: ReadableSpan) -> int:
        d = 0
        while s.parent is not None and s.parent.span_id in by_id:
            s, d = by_id[s.parent.span_id], d + 1
        return d

    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return ["  " * depth(s) + s.name for s in ordered]


def header(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{TRACE[:-2]}{n:02x}-{PARENT}-01"}


# A change of working memory's PostgreSQL mirror after a script: one statement.
MIRROR = (
    "INSERT working_memory_item UPDATE working_memory_item SELECT memory_key "
    "DELETE working_memory_item UPDATE working_memory_change INSERT memory_event"
)
# A placement's record.
PLACED = (
    "INSERT working_memory_item UPDATE working_memory_item UPDATE working_memory_change "
    "INSERT memory_event"
)
# A new robot's first working-memory change makes its working_memory_change row, between two
# tries of the lock.
ADD = f"""\
POST /v1/robots/{{robot}}/memories
  fastapi.dependencies
    SELECT namespace
    INSERT namespace
  fastapi.endpoint
    SELECT pg_attribute pg_type
    SELECT robot
    INSERT robot
    group commit
    SELECT working_memory_change SELECT robot SELECT memory
    INSERT working_memory_change SELECT robot
    SELECT working_memory_change SELECT robot SELECT memory
    SELECT working_memory_item
    SELECT working_memory_item memory SELECT robot SELECT pool
    EVALSHA load
    {MIRROR}
    EVALSHA place
    {PLACED}
  fastapi.serialization"""
# A recall whose hit the robot holds: the log row, the robot, the full-text search (its
# lexeme statistics read once), then working memory: a refresh that finds the hit placed by
# an add, not a recall, so a placement.
RECALL = f"""\
POST /v1/robots/{{robot}}/recall
  fastapi.dependencies
  fastapi.endpoint
    SELECT robot
    SELECT pg_inherits pg_class SELECT pg_stats
    SELECT
    SELECT memory SELECT robot
    SELECT memory SELECT robot SELECT memory_access SELECT memory_access memory robot
    INSERT memory_event
    EVALSHA refresh
    SELECT working_memory_change SELECT robot SELECT memory
    EVALSHA place
    {PLACED}
  fastapi.serialization"""


async def test_an_add_and_a_recall_as_span_trees_continuing_the_caller_s_trace(client) -> None:
    EXPORTER.clear()
    body = {"key": "k", "content": "the trace of an add", "embedding": [0.5] * 384}
    r = await client.post("/v1/robots/a/memories", json=body, headers=header(1))
    assert r.status_code == 201
    assert "\n".join(tree(TRACE[:-2] + "01")) == ADD
    recall = {"query": "trace", "strategy": "fulltext"}
    r = await client.post("/v1/robots/a/recall", json=recall, headers=header(2))
    assert [h["key"] for h in r.json()["hits"]] == ["k"]
    assert "\n".join(tree(TRACE[:-2] + "02")) == RECALL
    # the request's span continues the caller's trace, under the caller's span
    [root] = [
        s for s in EXPORTER.get_finished_spans()
        if s.context.trace_id == int(TRACE[:-2] + "02", 16) and s.parent is not None
        and s.parent.span_id == int(PARENT, 16)
    ]  # fmt: skip
    assert (root.kind, root.attributes["http.route"]) == (
        trace.SpanKind.SERVER, "/v1/robots/{robot}/recall"
    )  # fmt: skip
    # the database's spans by the OpenTelemetry conventions (db.system.name, the query's
    # summary as the name, the one table a statement names, the server)
    url = client.app.state.components.settings.database_url
    socket = unquote(url.split("?host=")[1]) + "/.s.PGSQL.5432"
    database = url.split("@/")[1].split("?")[0]
    spans = {s.name: s for s in EXPORTER.get_finished_spans()}
    assert (spans["INSERT memory_event"].kind, dict(spans["INSERT memory_event"].attributes)) == (
        trace.SpanKind.CLIENT,
        {
            "db.system.name": "postgresql",
            "db.namespace": database,
            "server.address": socket,
            "db.query.summary": "INSERT memory_event",
            "db.operation.name": "INSERT",
            "db.collection.name": "memory_event",
        },
    )
    two = spans["SELECT memory SELECT robot"].attributes
    assert (two["db.operation.name"], "db.collection.name" in two) == ("SELECT", False)
    redis = client.app.state.components.settings.redis_url
    host, port = redis.split("//")[1].split("/")[0].rsplit(":", 1)
    assert dict(spans["EVALSHA place"].attributes) == {
        "db.system.name": "redis",
        "server.address": host,
        "server.port": int(port),
        "db.namespace": redis.rsplit("/", 1)[1],
        "db.operation.name": "EVALSHA",
        "db.stored_procedure.name": "place",
    }
    # the group commit's statements serve several requests: a trace of their own
    flushes = [s.name for s in EXPORTER.get_finished_spans() if s.parent is None
               and s.attributes.get("db.system.name") == "postgresql"]  # fmt: skip
    # Background reads (the recall's working-memory load after its answer, the change
    # stream's) are root traces too; whether they have ended when the spans are read depends
    # on timing. So is the session expiry worker's claim, every 5 s (it straddled this test
    # once in CI, under load). Of the requests' writes, the flush alone is a trace of its own.
    flush = "INSERT memory_key INSERT memory_event INSERT speaker INSERT memory"
    assert flushes.count(flush) == 1
    expiry_claim = "UPDATE session robot SELECT session"  # SessionRepository.claim_due
    others = [f for f in flushes if f not in (flush, expiry_claim)]
    assert all(f.startswith("SELECT ") and " INSERT " not in f for f in others), others


async def test_metrics_carry_process_build_and_dependency_latency(client) -> None:
    await client.post("/v1/robots/a/memories", json={"content": "x"})
    text = (await client.get("/metrics")).text
    assert 'htm_build_info{version="1.1.0"} 1.0' in text
    assert "process_cpu_seconds_total" in text
    counts = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("htm_dependency_seconds_count")
    }
    assert set(counts) == {f'dependency="{d}"' for d in
                           ("postgresql", "redis", "embedder", "llm", "reranker")}  # fmt: skip
    assert counts['dependency="postgresql"'] > 0 and counts['dependency="redis"'] > 0
    assert "_created" not in text


@pytest.mark.parametrize(
    ("sql", "summary", "tables"),
    [
        ("SELECT 1", "SELECT", ()),
        ("SELECT a FROM memory m JOIN robot r ON r.id = m.robot_id FOR UPDATE OF m",
         "SELECT memory robot", ("memory", "robot")),
        # a CTE's name read is no table; a write's target is, even when a CTE shares it
        ("WITH d AS MATERIALIZED (DELETE FROM memory WHERE id = $1 RETURNING id), "
         "robot AS (UPDATE robot SET n = n - 1) "
         "INSERT INTO memory_event (memory_id) SELECT id FROM d ON CONFLICT (memory_id) DO "
         "UPDATE SET at = now()",
         "DELETE memory UPDATE robot INSERT memory_event", ("memory", "robot", "memory_event")),
        # functions, literals, comments, IS DISTINCT FROM, FOR NO KEY UPDATE say nothing
        ("SELECT extract(epoch FROM now()), 'FROM x' /* FROM y */ FROM unnest($1::int[]) u "
         "WHERE a IS DISTINCT FROM b -- FROM z\n FOR NO KEY UPDATE",
         "SELECT", ()),
        ("UPDATE api_key AS k SET revoked_at = now() WHERE k.id = (SELECT id FROM robot)",
         "UPDATE api_key SELECT robot", ("api_key", "robot")),
    ],
)  # fmt: skip
def test_a_statement_s_query_summary(sql: str, summary: str, tables: tuple[str, ...]) -> None:
    from app.db.spans import summary as summarise

    assert summarise(sql) == (summary, tables)
