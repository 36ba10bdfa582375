from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest


@pytest.fixture
def ns() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(app_factory, ns: str) -> AsyncIterator[httpx.AsyncClient]:
    """An app without an embedder (clients send vectors), scoped to a fresh namespace."""
    async with app_factory() as c:
        c.headers["X-Namespace"] = ns
        yield c
