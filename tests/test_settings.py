from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings

ENV = {
    "HTM_DATABASE_URL": "postgresql://u:p@db.example:5433/htm",
    "HTM_REDIS_URL": "redis://cache:6380/2",
    "HTM_REDIS_CLUSTER": "true",
    "HTM_REDIS_TIMEOUT_S": "0.5",
    "HTM_REDIS_RETRY_AFTER_S": "0",
    "HTM_DATA_DIR": "/var/lib/htm",
    "HTM_DB_POOL_SIZE": "20",
    "HTM_DB_MAX_OVERFLOW": "5",
    "HTM_STATEMENT_TIMEOUT_MS": "1500",
    "HTM_HYPERTABLE_CHUNK_INTERVAL": "1 day",
    "HTM_HOST": "0.0.0.0",
    "HTM_PORT": "9000",
    "HTM_LOG_LEVEL": "debug",
    "HTM_SHUTDOWN_GRACE_S": "5",
    "HTM_SHUTDOWN_TIMEOUT_S": "20",
    "HTM_WORKING_MEMORY_BUDGET": "4096",
    "HTM_EMBEDDING_PROVIDER": "openai",
    "HTM_EMBEDDING_MODEL": "text-embedding-3-small",
    "HTM_EMBEDDING_DIMENSION": "1536",
    "HTM_EMBEDDING_URL": "http://127.0.0.1:9999",
    "HTM_EMBEDDING_API_KEY": "sk-test",
    "HTM_EMBEDDING_TIMEOUT_S": "3",
    "HTM_EMBEDDING_BATCH_SIZE": "32",
    "HTM_EMBEDDING_BATCH_WAIT_MS": "2.5",
    "HTM_EMBEDDING_WORKER_INTERVAL_S": "0.5",
    "HTM_TIKTOKEN_ENCODING": "o200k_base",
    "HTM_AUTH_ENABLED": "true",
    "HTM_ALLOW_UNAUTHENTICATED": "true",
    "HTM_MAX_BODY_BYTES": "2048",
    "HTM_MAX_CONTENT_BYTES": "1000",
    "HTM_MAX_BATCH_SIZE": "50",
    "HTM_MAX_QUERY_CHARS": "300",
    "HTM_MAX_RECALL_LIMIT": "40",
    "HTM_MAX_METADATA_BYTES": "512",
    "HTM_MAX_METADATA_DEPTH": "3",
    "HTM_MAX_TAGS": "8",
    "HTM_RRF_K": "30",
    "HTM_HNSW_EF_SEARCH": "64",
    "HTM_METRICS_PUBLIC": "true",
    "HTM_LOG_FORMAT": "text",
}


def test_defaults_match_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    s = Settings(_env_file=None)
    assert s.database_url is None and s.redis_url is None
    assert s.working_memory_budget == 128_000
    assert (s.embedding_provider, s.embedding_model, s.embedding_dimension) == (
        "local",
        "all-MiniLM-L6-v2",
        384,
    )
    assert s.tiktoken_encoding == "cl100k_base"
    assert s.auth_enabled is False and s.allow_unauthenticated is False
    assert (s.max_content_bytes, s.max_batch_size, s.max_recall_limit) == (262_144, 500, 100)
    assert s.rrf_k == 60
    assert s.hypertable_chunk_interval == "7 days"
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert s.statement_timeout_ms == 5000
    assert (s.shutdown_grace_s, s.shutdown_timeout_s) == (0.0, 10.0)
    assert (s.metrics_public, s.log_format, s.log_level) == (False, "auto", "info")


def test_every_variable_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    s = Settings(_env_file=None)
    assert s.database_url == "postgresql+asyncpg://u:p@db.example:5433/htm"
    assert s.redis_url == "redis://cache:6380/2"
    assert s.redis_cluster is True and s.redis_timeout_s == 0.5
    assert s.redis_retry_after_s == 0
    assert s.data_dir == Path("/var/lib/htm")
    assert (s.db_pool_size, s.db_max_overflow) == (20, 5)
    assert s.statement_timeout_ms == 1500
    assert s.hypertable_chunk_interval == "1 day"
    assert (s.host, s.port, s.log_level) == ("0.0.0.0", 9000, "debug")
    assert (s.shutdown_grace_s, s.shutdown_timeout_s) == (5.0, 20.0)
    assert s.working_memory_budget == 4096
    assert (s.embedding_provider, s.embedding_model, s.embedding_dimension) == (
        "openai",
        "text-embedding-3-small",
        1536,
    )
    assert s.embedding_url == "http://127.0.0.1:9999"
    assert s.embedding_api_key is not None
    assert s.embedding_api_key.get_secret_value() == "sk-test"
    assert "sk-test" not in repr(s)
    assert (s.embedding_timeout_s, s.embedding_batch_size, s.embedding_batch_wait_ms) == (
        3.0,
        32,
        2.5,
    )
    assert s.embedding_worker_interval_s == 0.5
    assert s.tiktoken_encoding == "o200k_base"
    assert s.auth_enabled is True and s.allow_unauthenticated is True
    assert (s.max_body_bytes, s.max_content_bytes, s.max_batch_size) == (2048, 1000, 50)
    assert (s.max_query_chars, s.max_recall_limit) == (300, 40)
    assert (s.max_metadata_bytes, s.max_metadata_depth, s.max_tags) == (512, 3, 8)
    assert s.rrf_k == 30
    assert s.hnsw_ef_search == 64
    assert (s.metrics_public, s.log_format) == (True, "text")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HTM_EMBEDDING_PROVIDER", "cohere"),
        ("HTM_WORKING_MEMORY_BUDGET", "0"),
        ("HTM_PORT", "70000"),
        ("HTM_AUTH_ENABLED", "maybe"),
        ("HTM_EMBEDDING_DIMENSION", "-3"),
    ],
)
def test_invalid_values_are_rejected(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as err:
        Settings(_env_file=None)
    assert err.value.errors()[0]["loc"] == (name.removeprefix("HTM_").lower(),)


@pytest.mark.parametrize(
    "url", ["postgres://a@h/db", "postgresql://a@h/db", "postgresql+asyncpg://a@h/db"]
)
def test_database_url_uses_the_asyncpg_driver(url: str) -> None:
    assert Settings(_env_file=None, database_url=url).database_url == "postgresql+asyncpg://a@h/db"
