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
`Allow` header on a 405; a request the spec calls invalid must get a 4xx; and a request the
spec allows must be accepted (schemathesis' positive_data_acceptance), unless what refuses it
is one of BEYOND_THE_SCHEMA: the rules JSON Schema cannot state. Every rule it can state is
in the spec (patterns, bounds, uniqueItems, propertyNames, and `if`/`then` between fields).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance

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
        # Run as `schema_valid_requests_are_accepted`, below: the same check, knowing the
        # rules beyond the schema.
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


# What may refuse a request the spec allows: (field, what the refusal says), each a rule JSON
# Schema cannot state. A refusal passes only when every error it names is one of these.
BEYOND_THE_SCHEMA = [
    # The deployment's own limits (HTM_* settings): one spec serves every deployment.
    (r"(memories\[\d+\]\.|messages\[\d+\]\.)?content", r"bytes; the limit is \d+$"),  # 413
    (r"memories|messages", r"^a request holds at most \d+ "),  # 413, HTM_MAX_BATCH_SIZE
    (r"body\.(memories\.\d+\.)?embedding", r"dimensions; this deployment uses|wrong dimension"),
    (r"body\.(memories\.\d+\.)?tags", r"^at most \d+ tags$"),
    (r"body\.(memories\.\d+\.|messages\.\d+\.)?metadata", r"^over \d+ bytes$|^nested deeper"),
    (r"body\.(recall\.)?limit", r"^at most \d+$"),  # HTM_MAX_RECALL_LIMIT
    (r"body\.(input|reserve)", r"^needs \d+ tokens of \d+$|^reserves fill the context"),
    (r"body\.rerank", r"^no reranker configured$"),  # HTM_RERANK_URL unset
    # Both fusion weights 0, one of them perhaps absent: the deployment's default fills it.
    (r"body\.fusion\.vector_weight", r"^both weights are 0$"),
    (r"value", r"bytes as JSON; the limit is \d+$"),  # 413, HTM_STATE_MAX_BYTES
    (r"body\.ttl_s", r"^over HTM_STATE_MAX_TTL_S$"),
    # Metadata: NUL or an integer past 64 bits anywhere inside, nesting past 64 (JSON Schema
    # has no depth, and cannot tell 1e20 from 100000000000000000000).
    (
        r"body\.(memories\.\d+\.|messages\.\d+\.)?metadata",
        r"has (a key|a string) with NUL|has an integer outside|is nested deeper than 64",
    ),
    # Two values compared with each other: valid time, a rename, a link, `supersedes`.
    (r"body(\.memories\.\d+)?", r"valid_to must be after valid_from"),
    (r"body\.(memories\.\d+\.)?valid_to", r"^must be after the memory's start"),
    (r"body\.to", r"^must differ from `from`$|^renaming would make tags"),
    (r"body\.target", r"^the memory's own key$"),
    (r"body\.supersedes", r"own batch|superseded twice in this request"),
    (r"body", r"one policy per rule and type"),
    (r"body\.(recall\.)?signals", r"^weights add up to more than 1$"),  # a sum of fields
    # Parameters that exclude each other (OpenAPI has no rule between parameters).
    (r"(query|body)\.valid_at", r"^conflicts with include=superseded$"),
    (r"confirm", r"^a hard delete is permanent"),  # 400: hard=true needs confirm
    # Read as words, or as a range's order and a date that exists.
    (r"(query|body)\.(recall\.)?(timeframe|valid_at)", r""),
    (r"body\.schedule", r"is outside \d+-\d+$|never fires"),
    # A name normalised (app/entities/extract.py): case, possessive, spaces; what is left.
    (r"(path|query)\.entity", r"^not an entity: "),
    (r"body\.(recall\.)?filters\.entities", r"is no entity once normalised$"),
    (r"query\.as_of", r"^`entity` reads the current versions"),
    (
        r"body",
        r"nothing left once normalised$|an alias of itself$|is given two entities|"
        r"is both an alias and an entity",
    ),
    # Depending on the stored state or the clock.
    (r"cursor", r"^cursor is not one this service issued$"),  # 400
    (r"body\.visibility", r"^the robot is in no group$"),
    (r"", r"is in no group: there is no group state$"),  # a state key's scope=group
    (r"", r"^state key '[^']*' (does not exist|is at version \d+)$"),  # 412: If-Match
    (r"body\.expires_at", r"already past"),
]


def beyond_the_schema(response: Any) -> bool:
    problem = response.json()
    errors = problem.get("errors") or [
        {"field": problem.get("field", ""), "message": problem.get("detail", "")}
    ]
    return all(
        any(
            re.fullmatch(field, e["field"]) and re.search(said, e["message"])
            for field, said in BEYOND_THE_SCHEMA
        )
        for e in errors
    )


def schema_valid_requests_are_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    try:
        return positive_data_acceptance(ctx, response, case)  # type: ignore[no-any-return]
    except RejectedPositiveData:
        if beyond_the_schema(response):
            return None
        raise


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_the_committed_spec_holds_under_hostile_input(case: Any, app: Any) -> None:
    case.call_and_validate(app=app, additional_checks=[schema_valid_requests_are_accepted])
