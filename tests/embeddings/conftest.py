"""Fixtures for the embedding tests: a stub HTTP server and the real local model.

The stub HTTP server (tests/stubs.py, fixtures `stub_server`/`stub` in tests/conftest.py)
stands in for Ollama and OpenAI-compatible servers.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from app.embeddings import LocalEmbedder

# The bundled model must load without the Hugging Face hub; fail rather than download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def closed_port_url() -> str:
    """A URL on which nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def local_embedder() -> AsyncIterator[LocalEmbedder]:
    embedder = await LocalEmbedder.create("all-MiniLM-L6-v2", 384)
    yield embedder
    await embedder.aclose()
