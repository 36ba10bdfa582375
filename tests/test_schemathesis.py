"""The committed OpenAPI spec, fuzzed by schemathesis against the real app.

schemathesis reads openapi/openapi.json (the committed file: what clients are generated from)
and sends every operation valid and invalid requests — NUL bytes, extreme numbers, huge and
empty strings, wrong types, missing and unknown fields, undeclared methods — through the app's
ASGI interface, with the suite's real PostgreSQL and Redis, in a namespace of its own (the
X-Namespace header is pinned to it, so the fuzzing cannot spill into other namespaces). The
embedder is an OpenAI-compatible stub (tests/stubs.py), so vector recall and embed-on-add run
as in a deployment with a provider.

Every response must be: not a 5xx; a status the spec declares for the operation; the
declared media type (problem+json for errors); a body valid against the declared schema; an
`Allow` header on a 405; and a request the spec calls invalid must get a 4xx.

positive_data_acceptance is off: the spec cannot state the deployment's own limits (the
embedding dimension, content bytes, metadata depth and size, tags per memory, the recall
limit), so a request the spec allows can still rightly get a 4xx.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi

from app.http.openapi import SPEC_PATH
from app.main import create_app
from tests.conftest import make_settings
from tests.stubs import Recorded, StubServer

NAMESPACE = f"st-{uuid.uuid4().hex[:12]}"
DIM = 384

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 14,  # the same cases on every run; change it locally to explore
        "generation": {
            "mode": "all",  # valid and invalid requests
            "max-examples": 50,  # per operation, in the fuzzing phase; ~21 operations
            "allow-x00": True,  # NUL in generated strings
            "codec": "utf-8",
        },
        # Stateful runs need links between operations, which the spec does not declare; the
        # examples, coverage (boundaries: extreme numbers, empty and long strings, wrong
        # types, undeclared methods) and fuzzing phases cover every operation.
        "phases": {"stateful": {"enabled": False}},
        "checks": {"positive_data_acceptance": {"enabled": False}},
        "parameters": {"header.x-namespace": NAMESPACE},
    }
)


def embeddings(request: Recorded) -> tuple[int, Any]:
    """An OpenAI-compatible answer: a deterministic, never-zero vector per text."""
    data = []
    for index, text in enumerate(request.body["input"]):
        digest = hashlib.sha256(text.encode()).digest()
        vector = [(digest[i % 32] - 127.5) / 128 for i in range(DIM)]
        data.append({"index": index, "embedding": vector})
    return 200, {"data": data, "model": "stub"}


@pytest.fixture(scope="module")
def app(database_url: str, redis_url: str, stub_server: StubServer) -> Iterator[Any]:
    """The real app. schemathesis runs its lifespan on an event loop of its own (a thread),
    so the app's database and Redis pools live there."""
    stub_server.reply = embeddings
    settings = make_settings(
        database_url,
        redis_url,
        embedding_provider="openai",
        embedding_url=stub_server.url,
        embedding_model="stub",
    )
    yield create_app(settings, background=False)
    asgi.shutdown_lifespans()
    stub_server.reset()


# The working-memory change stream never ends (server-sent events): each call would wait out
# the client's timeout. tests/working_memory/test_change_stream.py tests it over real HTTP.
schema = schemathesis.openapi.from_path(SPEC_PATH, config=CONFIG).exclude(
    operation_id="working-memory-events"
)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_the_committed_spec_holds_under_hostile_input(case: Any, app: Any) -> None:
    case.call_and_validate(app=app)
