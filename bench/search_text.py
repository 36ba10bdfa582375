"""What a memory's search text costs in storage (issue 31; app/memories/search_text.py).

The scale data is plain (no `speaker` or `session` in metadata), so its search text is NULL
and its full-text column is the content's. At the end of a scale run (after every timed
phase) this adds K conversation memories through the batch endpoint: the contents of K
scale memories, in time order, as turns of sessions of `TURNS` with two speakers taking
turns (metadata `speaker` and `session`), so the service builds each one's contextual search
text (its date in words, its speaker, the turn before it). Then, over exactly those rows:

- `search_text`: pg_column_size averaged (bytes per conversation memory), and over the
  whole table (bytes per memory of the bench's data, plain included);
- `search_tsv`: pg_column_size averaged against the plain case, `to_tsvector('english',
  content)` of the same rows (what the generated column holds for a memory without a search
  text), as a ratio;
- the GIN index: the same K tsvectors each way copied into a temporary table and indexed
  with GIN, the two sizes and their ratio;
- the row: pg_column_size of the whole row (heap bytes, with the metadata and the speaker
  tag the client's speaker adds).
"""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

from bench import dataset
from bench.base import BATCH, JSON, check_status, vec_json
from bench.http import Http

ROBOT = "talker"
TURNS = 20  # turns per session
MAX_MEMORIES = 5_000

_HAS_SEARCH_TEXT = """
    SELECT 1 FROM pg_attribute
    WHERE attrelid = 'memory'::regclass AND attname = 'search_text' AND NOT attisdropped"""

_AVERAGES = """
    SELECT count(*) AS memories,
           count(m.search_text) AS with_search_text,
           avg(coalesce(pg_column_size(m.search_text), 0)) AS search_text_bytes,
           avg(length(m.search_text)) AS search_text_chars,
           avg(length(m.content)) AS content_chars,
           avg(pg_column_size(m.search_tsv)) AS tsv_bytes,
           avg(pg_column_size(to_tsvector('english'::regconfig, m.content))) AS plain_tsv_bytes,
           avg(pg_column_size(m.*)) AS row_bytes
    FROM memory m JOIN robot r ON r.id = m.author_robot_id
    WHERE r.name = $1"""

_TABLE = """
    SELECT avg(coalesce(pg_column_size(search_text), 0)) AS search_text_bytes,
           count(search_text) AS with_search_text, count(*) AS memories
    FROM memory"""


async def _gin_bytes(conn: asyncpg.Connection, select: str) -> int:
    await conn.execute(f"CREATE TEMP TABLE bench_tsv AS {select}")
    try:
        await conn.execute("CREATE INDEX ON bench_tsv USING gin (tsv)")
        return int(
            await conn.fetchval(
                "SELECT pg_indexes_size('bench_tsv'::regclass)"  # the one index
            )
        )
    finally:
        await conn.execute("DROP TABLE bench_tsv")


async def search_text_sizes(client: Http, pool: asyncpg.Pool, seed: int, n: int) -> dict[str, Any]:
    """The conversation memories' search text, tsvector and GIN sizes against the plain
    case (see the module's docstring); {} when the schema has no search text."""
    async with pool.acquire() as conn:
        if not await conn.fetchval(_HAS_SEARCH_TEXT):
            return {}
        table = dict(await conn.fetchrow(_TABLE))
        # A kept database (--reuse) has them from the run that first measured this.
        held = await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM memory_key WHERE key = $1)", "talk-000000"
        )
    k = min(n, MAX_MEMORIES)
    m = dataset.scale_memories(seed, k, offset=15)
    t0 = time.perf_counter()
    for start in range(0, 0 if held else k, BATCH):
        parts = []
        for i in range(start, min(k, start + BATCH)):
            session, turn = divmod(i, TURNS)
            # Two speakers per session, taking turns; people of the scale sentences.
            speaker = dataset.PEOPLE[(2 * session + turn % 2) % len(dataset.PEOPLE)]
            meta = {"speaker": speaker, "session": f"talk-{session:05d}"}
            parts.append(
                f'{{"key":"talk-{i:06d}","content":{json.dumps(m.contents[i])},'
                f'"type":"conversation","created_at":"{m.created_at[i].isoformat()}",'
                f'"metadata":{json.dumps(meta)},"embedding":{vec_json(m.vectors[i])}}}'
            )
        body = ('{"working_memory":false,"memories":[' + ",".join(parts) + "]}").encode()
        check_status(
            await client.post(f"/v1/robots/{ROBOT}/memories/batch", content=body, headers=JSON), 201
        )
    load_s = None if held else time.perf_counter() - t0
    async with pool.acquire() as conn:
        await conn.execute("ANALYZE memory")
        row = await conn.fetchrow(_AVERAGES, ROBOT)
        avg = {name: float(v or 0) for name, v in row.items()}
        rows = f"""FROM memory m JOIN robot r ON r.id = m.author_robot_id
                   WHERE r.name = '{ROBOT}'"""
        gin = await _gin_bytes(conn, f"SELECT m.search_tsv AS tsv {rows}")
        gin_plain = await _gin_bytes(
            conn, f"SELECT to_tsvector('english'::regconfig, m.content) AS tsv {rows}"
        )
        # Only conversation memories are in it (WHERE metadata ? 'session').
        turns = await conn.fetchval("SELECT pg_relation_size(to_regclass('memory_session_turns'))")
    return {
        "memories": k,
        "turns_per_session": TURNS,
        "load_s": load_s,
        "conversation": avg,
        "tsv_ratio": avg["tsv_bytes"] / avg["plain_tsv_bytes"] if avg["plain_tsv_bytes"] else None,
        "gin_bytes": gin,
        "gin_plain_bytes": gin_plain,
        "gin_ratio": gin / gin_plain if gin_plain else None,
        "session_index_bytes": turns,
        "scale_data": {name: float(v or 0) for name, v in table.items()},
    }
