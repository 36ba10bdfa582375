"""schema.sql is what the migrations make (app/db/schema.py; `make schema` writes it)."""

from __future__ import annotations

import asyncio
import difflib

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import upgrade
from app.db.schema import SCHEMA_FILE, current, normalise
from app.embedded import POSTGRES_MAJOR


async def _server(url: str) -> tuple[int, list[str]]:
    """The server's major version and the database's extensions."""
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        major = (
            await conn.execute(text("SELECT current_setting('server_version_num')::int / 10000"))
        ).scalar_one()
        extensions = list(
            (await conn.execute(text("SELECT extname FROM pg_extension ORDER BY 1"))).scalars()
        )
    await engine.dispose()
    return major, extensions


async def test_schema_sql_is_what_the_migrations_make(database_factory) -> None:
    """A freshly migrated database, dumped and normalised, is the committed schema.sql.

    Compared under either storage (CI runs the suite with the default, halfvec, and with
    HTM_VECTOR_STORAGE=vector) and any HTM_EMBEDDING_DIMENSION: `normalise` rewrites
    memory.embedding's type and its HNSW operator class to the defaults the file shows, and
    refuses a dump where those are not exactly one column and one index. Skipped on a server
    the file does not describe (HTM_TEST_DATABASE_URL): another PostgreSQL major than the
    embedded one, or extensions beside pgvector (TimescaleDB makes hypertables)."""
    url = await database_factory()
    await asyncio.to_thread(upgrade, url)
    major, extensions = await _server(url)
    if major != POSTGRES_MAJOR or extensions != ["plpgsql", "vector"]:
        pytest.skip(f"schema.sql is PostgreSQL {POSTGRES_MAJOR} with pgvector only")
    found = await asyncio.to_thread(current, url)
    committed = SCHEMA_FILE.read_text()
    if found != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                found.splitlines(keepends=True),
                "schema.sql (committed)",
                "schema.sql (what the migrations make)",
            )
        )
        pytest.fail(
            f"schema.sql is not what the migrations make: run `make schema`, read the "
            f"diff and commit the file with the migration.\n{diff}",
            pytrace=False,
        )


DUMP = """--
-- PostgreSQL database dump
--

\\restrict abc123

-- Dumped from database version 18.4
-- Dumped by pg_dump version 18.4

SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);

--
-- Name: memory; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.memory (
    id bigint NOT NULL,
    embedding public.{storage}({dim}),   \n    content text NOT NULL
);


--
-- Name: memory memory_embedding_hnsw; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX memory_hnsw ON public.memory USING hnsw (embedding public.{storage}_cosine_ops);


--
-- PostgreSQL database dump complete
--

\\unrestrict abc123
"""


def test_normalise_keeps_the_schema_and_shows_the_default_storage() -> None:
    shown = normalise(DUMP.format(storage="vector", dim=8), "0099")
    body = shown.split("\n\n", 1)[1]
    assert "revision 0099." in shown
    assert body == (
        "--\n-- Name: memory; Type: TABLE; Schema: public\n--\n\n"
        "CREATE TABLE public.memory (\n    id bigint NOT NULL,\n"
        "    embedding public.halfvec(384),\n    content text NOT NULL\n);\n\n"
        "--\n-- Name: memory memory_embedding_hnsw; Type: INDEX; Schema: public\n--\n\n"
        "CREATE INDEX memory_hnsw ON public.memory USING hnsw "
        "(embedding public.halfvec_cosine_ops);\n"
    )
    assert normalise(DUMP.format(storage="halfvec", dim=384), "0099") == shown


def test_normalise_refuses_a_dump_without_the_embedding_column() -> None:
    with pytest.raises(ValueError, match="found 0 and 1"):
        normalise(DUMP.format(storage="vector", dim=8).replace("    embedding", "    vec"), "1")
