import asyncio
import json

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import downgrade, upgrade
from tests.vectors import STORAGE, column_type

TABLES = {
    "namespace",
    "robot",
    "memory",
    "memory_key",
    "working_memory_item",
    "working_memory_change",  # a robot's last recorded change, its lock (migration 0034)
    "memory_event",
    "api_key",
    "robot_memory_count",  # statistics' counters (migration 0004)
    "namespace_memory_count",
    "robot_activity_day",
    "memory_version",  # earlier versions of replaced memories (migration 0006)
    "retention_policy",  # a namespace's retention policies (migration 0018)
    "maintenance_schedule",  # scheduled reflection (migration 0019)
    "maintenance_run",
    "pool",  # pools with grants (migration 0020)
    "memory_link",  # relationships (migration 0023)
    "memory_tag",
    "working_memory_snapshot",  # snapshots of working memory (migration 0022)
    "working_memory_snapshot_item",
    "working_memory_snapshot_readable",
    "session",  # sessions (migration 0007)
    "session_message",
    "speaker",  # the speakers a namespace's memories name (0016)
    "memory_alias",  # keys merged by htm dedupe resolve to the survivor (migration 0011)
    "memory_access",  # access counts, out of memory's wide rows (migration 0025)
    "entity_alias",  # a namespace's entity aliases (migration 0026)
    "robot_state",  # a robot's (or group's) state keys (migration 0030)
    "alembic_version",
}
MEMORY_INDEXES = {
    "memory_pkey",
    "memory_namespace_created",
    "memory_author_created",
    "memory_embedding_hnsw",
    "memory_search_tsv",  # full text of coalesce(search_text, content) (0016)
    "memory_session_turns",  # a session's turns in order (0016)
    "memory_valid_to",  # ended memories by when they ended (0017)
    "memory_superseded_by",  # a supersede chain walked back (0017)
    "memory_restricted",  # a robot's private and group memories (0020)
    "memory_pool",  # a pool's memories (0020)
    "memory_pending_embedding",
    "memory_tag_paths",  # GIN on tag_paths(tags): hierarchical tag filters (0006)
    "memory_metadata",  # GIN (jsonb_path_ops): metadata containment filters
    "memory_content_md5",  # exact duplicates of live memories (0011)
    "memory_pending_enrichment",  # the LLM enrichment worker's queue (0013)
    "memory_entities",  # GIN on entities: entity filters (0026)
}


async def _schema(url: str) -> tuple[set[str], set[str], str | None, str]:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        tables = set(
            (
                await conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                )
            ).scalars()
        )
        indexes = set(
            (
                await conn.execute(
                    text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory'")
                )
            ).scalars()
        )
        hnsw = (
            await conn.execute(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'")
            )
        ).scalar()
        dim = (
            await conn.execute(
                text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = to_regclass('memory') AND attname = 'embedding'"
                )
            )
        ).scalar()
    await engine.dispose()
    return tables, indexes, hnsw, dim or ""


async def test_upgrade_downgrade_upgrade_round_trip(database_factory) -> None:
    url = await database_factory()

    await asyncio.to_thread(upgrade, url)
    tables, indexes, hnsw, dim = await _schema(url)
    assert tables == TABLES
    assert indexes == MEMORY_INDEXES
    assert hnsw is not None
    ops = f"{STORAGE}_cosine_ops"
    assert f"USING hnsw (embedding {ops}) WITH (m='16', ef_construction='64')" in hnsw
    assert dim == column_type(384)

    await asyncio.to_thread(downgrade, url, "base")
    tables, indexes, _, _ = await _schema(url)
    assert tables == {"alembic_version"}
    assert indexes == set()

    await asyncio.to_thread(upgrade, url)
    tables, indexes, _, _ = await _schema(url)
    assert tables == TABLES
    assert indexes == MEMORY_INDEXES


async def test_access_counts_move_to_memory_access_and_back(database_factory) -> None:
    """0025 carries each memory's counts into memory_access (a row only for memories read
    at least once) and drops memory's columns; its downgrade puts them back."""
    url = await database_factory()
    await asyncio.to_thread(upgrade, url, "0024")
    at = "2026-11-20 10:00:00+00"
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(
            text(f"""
            WITH ns AS (INSERT INTO namespace (name) VALUES ('m') RETURNING id),
                 r AS (INSERT INTO robot (namespace_id, name) SELECT id, 'r' FROM ns
                       RETURNING id, namespace_id),
                 k AS (INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
                       SELECT r.namespace_id, 'k' || i, i, '{at}' FROM r, generate_series(1, 3) i)
            INSERT INTO memory (id, created_at, namespace_id, key, content, author_robot_id,
                                token_count, access_count, last_accessed_at)
            SELECT i, '{at}', r.namespace_id, 'k' || i, 'c' || i, r.id, 1, (i - 1) * 2,
                   CASE WHEN i > 1 THEN timestamptz '{at}' + i * interval '1 hour' END
            FROM r, generate_series(1, 3) i""")
        )
    await asyncio.to_thread(upgrade, url)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT memory_id, access_count, extract(hour FROM last_accessed_at AT TIME ZONE"
                 " 'UTC') FROM memory_access ORDER BY memory_id")
        )  # fmt: skip
        assert [tuple(r) for r in rows] == [(2, 2, 12), (3, 4, 13)]
    await asyncio.to_thread(downgrade, url, "0024")
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT id, access_count, last_accessed_at IS NULL FROM memory ORDER BY id")
        )
        assert [tuple(r) for r in rows] == [(1, 0, True), (2, 2, False), (3, 4, False)]
    await engine.dispose()


async def test_0027_copies_valid_metadata_confidence_and_source_and_keeps_the_metadata(
    database_factory,
) -> None:
    """0027 copies `metadata.confidence` (a number in [0, 1]) and `metadata.source` (a string
    the API accepts) into their columns; anything else stays metadata only, and the
    metadata itself is left as it was."""
    url = await database_factory()
    await asyncio.to_thread(upgrade, url, "0025")
    at = "2026-11-20 10:00:00+00"
    metadata = [
        {"confidence": 0.8, "source": "tool:web"},
        {"confidence": 1.5, "source": "-bad"},
        {"confidence": "high", "source": 3},
        {"source": "htm load", "path": "a.md"},
        {"confidence": 0},
        {},
    ]
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(
            text(f"""
            WITH ns AS (INSERT INTO namespace (name) VALUES ('m') RETURNING id),
                 r AS (INSERT INTO robot (namespace_id, name) SELECT id, 'r' FROM ns
                       RETURNING id, namespace_id),
                 md AS (SELECT i, CAST(x AS jsonb) AS x
                        FROM unnest(CAST(:md AS text[])) WITH ORDINALITY AS t(x, i)),
                 k AS (INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
                       SELECT r.namespace_id, 'k' || i, i, '{at}' FROM r, md)
            INSERT INTO memory (id, created_at, namespace_id, key, content, author_robot_id,
                                token_count, metadata)
            SELECT i, '{at}', r.namespace_id, 'k' || i, 'c' || i, r.id, 1, md.x
            FROM r, md"""),
            {"md": [json.dumps(m) for m in metadata]},
        )
    await asyncio.to_thread(upgrade, url)
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT id, confidence, source, metadata FROM memory ORDER BY id")
        )
        assert [tuple(r) for r in rows] == [
            (1, 0.8, "tool:web", metadata[0]),
            (2, None, None, metadata[1]),
            (3, None, None, metadata[2]),
            (4, None, "htm load", metadata[3]),
            (5, 0.0, None, metadata[4]),
            (6, None, None, metadata[5]),
        ]
    await asyncio.to_thread(downgrade, url, "0025")
    async with engine.connect() as conn:
        columns = await conn.execute(
            text("SELECT column_name FROM information_schema.columns "
                 "WHERE table_name = 'memory' AND column_name IN ('confidence', 'source')")
        )  # fmt: skip
        assert list(columns) == []
    await engine.dispose()


async def test_0026_gives_existing_memories_their_entities(database_factory) -> None:
    """0026 runs the extractor over the memories already stored, in batches; its downgrade
    drops the columns, the index and the aliases."""
    url = await database_factory()
    await asyncio.to_thread(upgrade, url, "0025")
    at = "2026-11-20 10:00:00+00"
    contents = ["Carla met Ana in Lisbon", "nothing here", "INC-7 for Bob's team"]
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(
            text(f"""
            WITH ns AS (INSERT INTO namespace (name) VALUES ('m') RETURNING id),
                 r AS (INSERT INTO robot (namespace_id, name) SELECT id, 'r' FROM ns
                       RETURNING id, namespace_id),
                 k AS (INSERT INTO memory_key (namespace_id, key, memory_id, memory_created_at)
                       SELECT r.namespace_id, 'k' || i, i, '{at}' FROM r, generate_series(1, 3) i)
            INSERT INTO memory (id, created_at, namespace_id, key, content, author_robot_id,
                                token_count, metadata)
            SELECT i, '{at}', r.namespace_id, 'k' || i, (CAST(:contents AS text[]))[i], r.id, 1,
                   CASE WHEN i = 2 THEN '{{"speaker": "Dee"}}'::jsonb ELSE '{{}}'::jsonb END
            FROM r, generate_series(1, 3) i"""),
            {"contents": contents},
        )
    await asyncio.to_thread(upgrade, url)
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, entities, entity_kinds FROM memory ORDER BY id"))
        assert [tuple(r) for r in rows] == [
            (1, ["carla", "ana", "lisbon"], ["name", "name", "name"]),
            (2, ["dee"], ["person"]),
            (3, ["inc-7", "bob"], ["code", "name"]),
        ]
    await asyncio.to_thread(downgrade, url, "0025")
    tables, indexes, _, _ = await _schema(url)
    assert "entity_alias" not in tables and "memory_entities" not in indexes
    await engine.dispose()


async def test_vector_dimension_comes_from_settings(database_factory, monkeypatch) -> None:
    from app.config import get_settings

    url = await database_factory()
    monkeypatch.setenv("HTM_EMBEDDING_DIMENSION", "1536")
    get_settings.cache_clear()
    try:
        await asyncio.to_thread(upgrade, url)
    finally:
        monkeypatch.delenv("HTM_EMBEDDING_DIMENSION")
        get_settings.cache_clear()
    _, _, _, dim = await _schema(url)
    assert dim == column_type(1536)


async def test_tag_paths_lists_every_tag_and_its_ancestors_once(database_url) -> None:
    engine = create_async_engine(database_url)
    async with engine.connect() as conn:

        async def paths(tags: list[str]) -> list[str]:
            got = (
                await conn.execute(text("SELECT tag_paths(CAST(:t AS text[]))"), {"t": tags})
            ).scalar_one()
            return sorted(got)

        assert await paths(["db:pg:tuning"]) == ["db", "db:pg", "db:pg:tuning"]
        assert await paths(["db:pg", "db:mysql", "ops"]) == [
            "db",
            "db:mysql",
            "db:pg",
            "ops",
        ]
        assert await paths(["dbs", "db"]) == ["db", "dbs"]
        assert await paths([]) == []
    await engine.dispose()


async def test_0015_gives_names_the_api_refuses_names_it_accepts(database_factory) -> None:
    """Robots and namespaces that the CLI once stored without the naming rule."""
    url = await database_factory()
    await asyncio.to_thread(upgrade, url, "0014")
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO namespace (name) VALUES ('ok'), ('bad ns!')"))
        await conn.execute(
            text("""
            INSERT INTO robot (namespace_id, name)
            SELECT n.id, r FROM namespace n,
                   unnest(ARRAY['bad robot!', 'bad-robot-', 'fine', 'é']) r
            WHERE n.name = 'ok'""")
        )
        taken = (
            await conn.execute(text("SELECT id FROM robot WHERE name = 'bad robot!'"))
        ).scalar_one()
    await asyncio.to_thread(upgrade, url)
    async with engine.connect() as conn:
        robots = set((await conn.execute(text("SELECT name FROM robot"))).scalars())
        namespaces = set((await conn.execute(text("SELECT name FROM namespace"))).scalars())
    await engine.dispose()
    # 'bad robot!' becomes 'bad-robot-', which is taken: its id is added.
    assert robots == {f"bad-robot--{taken}", "bad-robot-", "fine", "-"}
    assert namespaces == {"ok", "bad-ns-"}
