"""The HTTP contract: the committed OpenAPI spec, and problem+json for every error status."""

from __future__ import annotations

import json
import uuid

import pytest

from app.embedded import free_port
from app.http.openapi import SPEC_PATH, render
from app.main import create_app
from tests.conftest import make_settings

PROBLEM = "application/problem+json"


def test_committed_spec_matches_the_app() -> None:
    app = create_app(make_settings("postgresql+asyncpg://x@h/db", "redis://h"))
    assert SPEC_PATH.read_text() == render(app), "openapi/openapi.json is stale: run make openapi"


def _resolve(spec: dict, schema: dict) -> dict:
    ref = schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema


def test_spec_has_ids_summaries_descriptions_examples_and_errors() -> None:
    spec = json.loads(SPEC_PATH.read_text())
    ids = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            ids.append(op["operationId"])
            assert op.get("summary") and op.get("description"), (method, path)
            if "requestBody" in op:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                assert _resolve(spec, schema).get("examples"), (method, path)
            if path.startswith("/v1/"):
                for code in ("401", "403", "404", "422", "503"):
                    content = op["responses"][code]["content"]
                    assert list(content) == [PROBLEM], (method, path, code)
    assert len(ids) == len(set(ids))
    assert {"memories-add", "recall-search", "context-get", "stats-robot"} <= set(ids)


@pytest.fixture
async def client(app_factory):
    async with app_factory(max_body_bytes=4096) as c:
        c.headers["X-Namespace"] = f"t-{uuid.uuid4().hex[:10]}"
        yield c


async def _status_cases(client) -> dict[int, object]:
    await client.post("/v1/robots/a/memories", json={"content": "x", "key": "dup"})
    return {
        400: await client.post(
            "/v1/robots/a/memories", content=b"{", headers={"content-type": "application/json"}
        ),
        404: await client.get("/v1/robots/a/memories/absent"),
        409: await client.post("/v1/robots/a/memories", json={"content": "y", "key": "dup"}),
        413: await client.post("/v1/robots/a/memories", json={"content": "z" * 5000}),
        422: await client.post("/v1/robots/a/memories", json={"content": "x", "importance": 99}),
    }


async def test_every_error_status_is_rfc9457_problem_json(client, app_factory) -> None:
    cases = await _status_cases(client)
    async with app_factory(auth_enabled=True) as authed:
        cases[401] = await authed.get("/v1/robots")
    dead = f"redis://127.0.0.1:{free_port()}/0"
    async with app_factory(redis_url=dead) as down:
        cases[503] = await down.get("/readyz")
    for status, r in cases.items():
        assert r.status_code == status, (status, r.text)
        assert r.headers["content-type"] == PROBLEM, status
        body = r.json()
        assert body["status"] == status
        assert body["type"].startswith("https://") and body["title"] and body["detail"]
    assert cases[422].json()["errors"][0]["field"] == "body.importance"


async def test_body_over_the_limit_is_413_before_any_work(client) -> None:
    r = await client.post(
        "/v1/robots/a/memories/batch", json={"memories": [{"content": "x" * 100}] * 100}
    )
    assert r.status_code == 413
    assert r.json()["limit"] == 4096
    assert (await client.get("/v1/robots")).json() == []  # not even the robot was registered


async def test_database_outage_is_503_without_sql_or_traces(app_factory) -> None:
    dead = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/htm"
    async with app_factory(database_url=dead) as client:
        r = await client.post("/v1/robots/a/memories", json={"content": "x"})
    assert r.status_code == 503
    assert r.headers["content-type"] == PROBLEM
    text = r.text.lower()
    assert "select" not in text and "insert" not in text and "traceback" not in text
    assert r.json()["dependency"] == "postgres"


# A body the spec allows is one the request model takes, and one it refuses the model refuses:
# the rules between fields and the bounds the models check are in the spec too.
E = [0.0] * 383 + [1.0]
AGREEMENT_CASES = [
    ("ApiKeyCreate", {"name": "n", "role": "writer", "robot": "ann"}),
    ("ApiKeyCreate", {"name": "n", "role": "admin", "robot": "ann"}),
    ("ApiKeyCreate", {"name": "n", "role": "admin", "robot": None}),
    ("PoolPut", {"type": "task", "expires_at": "2030-01-01T00:00:00Z"}),
    ("PoolPut", {"type": "task"}),
    ("PoolPut", {"type": "team", "expires_at": "2030-01-01T00:00:00Z"}),
    ("PoolPut", {"type": "team", "expires_at": None}),
    ("MemoryCreate", {"content": "x", "visibility": "pool", "pool": "ops"}),
    ("MemoryCreate", {"content": "x", "visibility": "pool"}),
    ("MemoryCreate", {"content": "x", "visibility": "private", "pool": "ops"}),
    ("MemoryCreate", {"content": "x", "pool": "ops"}),
    ("MemoryCreate", {"content": "x", "readers": ["bob"]}),
    ("MemoryCreate", {"content": "x", "readers": ["bob"], "visibility": "private"}),
    ("MemoryCreate", {"content": "x", "readers": [], "visibility": "group"}),
    ("MemoryCreate", {"content": "x", "supersedes": ["a", "a"]}),
    ("MemoryCreate", {"content": "x", "embedding": E}),
    ("MemoryCreate", {"content": "x", "embedding": [0.0] * 384}),
    ("MemoryCreate", {"content": "x", "embedding": [1e-19] * 384}),
    ("MemoryCreate", {"content": "x", "embedding": [1e18, *E[1:]]}),
    ("MemoryCreate", {"content": "x", "created_at": "1899-12-31T23:00:00-05:00"}),
    ("MemoryCreate", {"content": "x", "created_at": "1900-01-01T00:00:00+05:00"}),
    ("MemoryCreate", {"content": "x", "created_at": "9998-12-31T23:00:00-05:00"}),
    ("MemoryCreate", {"content": "x", "created_at": "9999-01-01T00:00:00+05:00"}),
    ("ImportanceChange", {"importance": 5}),
    ("ImportanceChange", {"importance": 5, "boost": None}),
    ("ImportanceChange", {"importance": 5, "boost": 1}),
    ("ImportanceChange", {}),
    ("ImportanceChange", {"confidence": 0.5}),
    ("ImportanceChange", {"confidence": None}),
    ("ImportanceChange", {"source": "user", "boost": 1}),
    ("ImportanceChange", {"source": "-user"}),
    ("ImportanceChange", {"confidence": 1.5}),
    ("ImportanceChange", {"importance": None, "boost": None}),
    ("ImportanceChange", {"importance": 1, "boost": 1, "confidence": 0.5}),
    ("RetentionPolicy", {"rule": "stale", "days": 30, "threshold": 0.5}),
    ("RetentionPolicy", {"rule": "idle", "days": 30, "threshold": 0.5}),
    ("RetentionPolicy", {"rule": "idle", "days": 30.0}),
    ("GroupUpdate", {"members": ["a", "b"]}),
    ("GroupUpdate", {"members": ["a", "a"]}),
    ("MaintenanceSchedule", {"steps": ["dedupe", "dedupe"]}),
    ("MaintenanceSchedule", {"schedule": "30 3 * * *"}),
    ("MaintenanceSchedule", {"schedule": " 0\\t0 1,15 */2 1-5 "}),
    ("MaintenanceSchedule", {"schedule": "60 * * * *"}),
    ("MaintenanceSchedule", {"schedule": "* * * *"}),
    ("MaintenanceSchedule", {"schedule": "* * * * mon"}),
    ("MaintenanceSchedule", {"schedule": "*/² * * * *"}),
    ("ProfilePatch", {"slots": {"city": "Lisbon"}}),
    ("ProfilePatch", {"slots": {"City": "Lisbon"}}),
    ("ProfilePatch", {"slots": {"Bad Key": 5}}),
    ("RecallRequest", {"query": "x", "neighbours": 5.0, "fusion": {"k": 60.0, "candidates": 50.0}}),
    ("SnapshotCreate", {"name": ""}),
]


@pytest.mark.parametrize(("name", "body"), AGREEMENT_CASES)
def test_the_spec_and_the_request_models_agree(name: str, body: dict) -> None:
    import jsonschema

    from app.auth.schemas import ApiKeyCreate
    from app.groups.schemas import GroupUpdate
    from app.maintenance.schemas import MaintenanceSchedule
    from app.memories.schemas import ImportanceChange, MemoryCreate
    from app.pools.schemas import PoolPut
    from app.profiles.schemas import ProfilePatch
    from app.recall.schemas import RecallRequest
    from app.retention.schemas import RetentionPolicy
    from app.snapshots.schemas import SnapshotCreate

    models = {m.__name__: m for m in (
        ApiKeyCreate, GroupUpdate, MaintenanceSchedule, ImportanceChange, MemoryCreate,
        PoolPut, ProfilePatch, RecallRequest, RetentionPolicy, SnapshotCreate,
    )}  # fmt: skip
    spec = json.loads(SPEC_PATH.read_text())
    root = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    allowed = jsonschema.Draft202012Validator(root).is_valid(body)
    try:
        models[name].model_validate_json(json.dumps(body))
        taken = True
    except ValueError:
        taken = False
    assert allowed == taken, (allowed, taken)
