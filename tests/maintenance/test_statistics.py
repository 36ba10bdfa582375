"""Statistics that exist (issue 46): after a bulk load the statistics pass analyzes memory
(pg_stat_user_tables.last_analyze set, no change left unanalyzed, search_tsv's lexeme
statistics in pg_stats), forgets the search caches' "no statistics yet", and then leaves the
table alone until enough changes again; a table whose autovacuum is off is never touched."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import text

from app.db.migrate import upgrade
from app.maintenance.statistics import StatisticsWorker
from app.maintenance.statistics_repository import ANALYZE_SCALE

STATE = text("""
    SELECT s.analyze_count + s.autoanalyze_count AS analyzed, s.n_mod_since_analyze AS changed,
           (SELECT count(*) FROM pg_stats
            WHERE tablename = 'memory' AND attname = 'search_tsv'
              AND most_common_elems IS NOT NULL) AS lexeme_stats
    FROM pg_stat_user_tables s WHERE s.relname = 'memory'""")


async def state(client) -> tuple[int, int, int]:
    """(ANALYZEs of memory so far, rows changed since the last, lexeme statistics rows)."""
    async with client.app.state.components.sessionmaker() as s:
        r = (await s.execute(STATE)).one()
        return int(r.analyzed), int(r.changed), int(r.lexeme_stats)


async def changes_counted(client, n: int) -> None:
    """Until the loading backends' counters reach the statistics views (PostgreSQL flushes
    them within a second of a transaction's end)."""
    for _ in range(100):
        if (await state(client))[1] >= n:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"n_mod_since_analyze never reached {n}: {await state(client)}")


async def load(client, n: int, start: int = 0) -> None:
    topics = ("deploys", "the staging database", "Caroline's parade", "the support group")
    for first in range(start, start + n, 250):
        memories = [
            {"key": f"m{i:05d}", "content": f"Note {i} about {topics[i % 4]} and release {i % 7}"}
            for i in range(first, min(start + n, first + 250))
        ]
        r = await client.post("/v1/robots/loader/memories/batch", json={"memories": memories})
        assert r.status_code == 201, r.text


async def fresh_database(database_factory) -> str:  # type: ignore[no-untyped-def]
    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    return url


async def test_a_bulk_load_is_analyzed_once_and_then_left_alone(
    app_factory, database_factory
) -> None:
    url = await fresh_database(database_factory)
    async with app_factory(database_url=url, analyze_min_changed_rows=500) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        components = client.app.state.components
        async with components.sessionmaker() as s:
            # autovacuum stays on, but cannot get to the table within this test.
            await s.execute(
                text("ALTER TABLE memory SET (autovacuum_analyze_threshold = 1000000000)")
            )
            await s.commit()
        worker = components.statistics_worker
        assert isinstance(worker, StatisticsWorker)

        analyzed = (await state(client))[0]  # the migrations analyze the empty table
        await load(client, 400)
        await changes_counted(client, 400)
        assert await worker.run_once() is False  # 400 < 500 changed rows: not yet
        assert await state(client) == (analyzed, 400, 0)

        await load(client, 800, start=400)
        await changes_counted(client, 1200)
        caches = components.search_caches
        caches.lexeme_stats.remember(None)  # "no statistics yet", as a recall just read
        caches.table_rows.remember(-1.0)
        assert await worker.run_once() is True
        assert (await state(client)) == (analyzed + 1, 0, 1)
        assert worker.analyzed == 1
        # This process reads the new statistics on its next recall.
        assert caches.lexeme_stats.current() is None
        assert caches.table_rows.current() is None
        r = await client.post(
            "/v1/robots/loader/recall", json={"query": "Caroline parade", "strategy": "fulltext"}
        )
        assert r.status_code == 200, r.text
        assert caches.table_rows.current() is None  # full text reads no row estimate
        assert caches.lexeme_stats.current() == (None,)  # 1,200 rows: below min_rows, counted

        # Fewer changes than a tenth of the 1,200 rows (and than the minimum): left alone.
        await load(client, 100, start=1200)
        await changes_counted(client, 100)
        assert await worker.run_once() is False
        assert (await state(client))[:2] == (analyzed + 1, 100)
        assert ANALYZE_SCALE * 1200 > 100


async def test_a_table_whose_autovacuum_is_off_is_left_alone(app_factory, database_factory) -> None:
    url = await fresh_database(database_factory)
    async with app_factory(database_url=url, analyze_min_changed_rows=100) as client:
        client.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:12]}"
        components = client.app.state.components
        async with components.sessionmaker() as s:
            await s.execute(text("ALTER TABLE memory SET (autovacuum_enabled = off)"))
            await s.commit()
        analyzed = (await state(client))[0]
        await load(client, 300)
        await changes_counted(client, 300)
        assert await components.statistics_worker.run_once() is False
        assert await state(client) == (analyzed, 300, 0)
