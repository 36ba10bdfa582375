"""docker-compose.yml: every image pinned to a version (no moving tag), the database on the
PostgreSQL major the tests run, no secret written in the file."""

from __future__ import annotations

import re

from app.config import PROJECT_ROOT

COMPOSE = (PROJECT_ROOT / "docker-compose.yml").read_text()


def test_images_are_pinned_and_the_database_is_the_tested_major() -> None:
    images = re.findall(r"^\s*image:\s*(\S+)", COMPOSE, flags=re.MULTILINE)
    assert images == ["pgvector/pgvector:0.8.2-pg18", "redis:7.4.2-alpine"]
    for image in images:
        tag = image.split(":", 1)[1]
        assert re.match(r"\d+\.\d+\.\d+", tag), image  # major.minor.patch, not `latest` or `7`
    assert images[0].endswith("-pg18")  # the embedded server the tests run is PostgreSQL 18


def test_the_timescaledb_guidance_names_the_same_postgresql_major() -> None:
    """The comment that tells how to run TimescaleDB names an image for the major the db
    image and the tests run, and a release that counts inserts per statement (0024)."""
    db = re.findall(r"^\s*image:\s*(\S+)", COMPOSE, flags=re.MULTILINE)[0]
    major = db.rsplit("-pg", 1)[1]
    guidance = re.findall(r"timescale/timescaledb-ha:pg(\d+)\.N-ts2\.M\.P with", COMPOSE)
    assert guidance == [major]
    assert "TimescaleDB 2.26.4 or later" in COMPOSE


def test_no_secret_is_written_in_it() -> None:
    assert "POSTGRES_PASSWORD: ${DB_PASSWORD:?" in COMPOSE
    assert not re.search(r"(?i)password\s*[:=]\s*['\"]?\w", COMPOSE.replace("${DB_PASSWORD", ""))
