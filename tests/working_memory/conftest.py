"""Fixtures for the working-memory store: a store on the session Redis and unique robots (the
3-master Redis Cluster fixture, `redis_cluster`, is in tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from app.working_memory.store import WorkingMemoryStore


@pytest.fixture
def robot() -> str:
    """A robot name no other test uses, so tests share one Redis without interfering."""
    return f"robot-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(redis: aioredis.Redis) -> WorkingMemoryStore:
    return WorkingMemoryStore(redis)
