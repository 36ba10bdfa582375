"""Numbers in free-form JSON (metadata) come back as sent or are refused: integers within
int64 are kept exactly, larger ones are a 422 naming where they are (they used to be stored
as floats: 18446744073709551617 came back as 1.8446744073709552e+19), on every way in: add,
batch, PUT, session append, MCP, htm import. NaN and Infinity are refused too."""

from __future__ import annotations

import json
import math
import uuid

import httpx2
import pytest
from pydantic import ValidationError

from app.memories.schemas import MemoryCreate
from app.sessions.schemas import MessagesAppend
from tests.mcp.test_mcp_tools import mcp_session
from tests.test_bad_input import assert_nothing_written, assert_problem, send

M = "/v1/robots/a/memories"
BIG = "18446744073709551617"  # 2^64 + 1
BELOW = "-9223372036854775809"  # -2^63 - 1


def add_with(metadata: str, key: str = "k") -> str:
    return f'{{"content": "x", "key": "{key}", "metadata": {metadata}}}'


async def test_int64_edges_are_kept_exactly(client, ns) -> None:
    edges = '{"max": 9223372036854775807, "min": -9223372036854775808}'
    r = await send(client, "POST", M, add_with(edges))
    assert r.status_code == 201, r.text
    stored = await client.get(M + "/k")
    assert '"max":9223372036854775807' in stored.text.replace(" ", "")
    assert stored.json()["metadata"] == {"max": 2**63 - 1, "min": -(2**63)}


@pytest.mark.parametrize(
    ("metadata", "where"),
    [
        (f'{{"big": {BIG}}}', "big"),
        (f'{{"small": {BELOW}}}', "small"),
        ('{"u64": 9223372036854775808}', "u64"),  # orjson kept it, but past int64
        (f'{{"a": [1, {{"b": {BIG}}}]}}', "a[1].b"),
        (f'{{"a": {{"b": [[{BIG}]]}}}}', "a.b[0][0]"),
    ],
)
async def test_an_integer_past_int64_is_422_naming_where_and_nothing_is_written(
    client, ns, metadata, where
) -> None:
    r = await send(client, "POST", M, add_with(metadata))
    problem = assert_problem(r, 422, "body.metadata")
    assert f"outside the signed 64-bit range at {where}:" in problem["detail"], problem
    await assert_nothing_written(client, ns)


async def test_a_batch_with_one_such_integer_writes_nothing(client, ns) -> None:
    bad = add_with(f'{{"n": {BIG}}}', "b")
    batch = f'{{"memories": [{add_with("{}", "a")}, {bad}]}}'
    r = await send(client, "POST", M + "/batch", batch)
    problem = assert_problem(r, 422, "body.memories.1.metadata")
    assert "outside the signed 64-bit range at n:" in problem["detail"]
    await assert_nothing_written(client, ns)


async def test_a_put_with_such_an_integer_changes_nothing(client, ns) -> None:
    assert (await send(client, "POST", M, add_with('{"n": 1}'))).status_code == 201
    r = await send(client, "PUT", M + "/k", f'{{"content": "y", "metadata": {{"n": {BIG}}}}}')
    assert_problem(r, 422, "body.metadata")
    stored = (await client.get(M + "/k")).json()
    assert (stored["version"], stored["content"], stored["metadata"]) == (1, "x", {"n": 1})


async def test_a_session_append_with_such_an_integer_writes_nothing(client, ns) -> None:
    body = f'{{"messages": [{{"role": "user", "content": "hi", "metadata": {{"n": {BIG}}}}}]}}'
    r = await send(client, "POST", "/v1/robots/a/sessions/s1/messages", body)
    assert_problem(r, 422, "body.messages.0.metadata")
    await assert_nothing_written(client, ns)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_not_json(client, ns, literal) -> None:
    r = await send(client, "POST", M, add_with(f'{{"f": {literal}}}'))
    assert assert_problem(r, 400)["title"] == "Malformed JSON"
    await assert_nothing_written(client, ns)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (add_with('{"f": 1e400}'), "body.metadata"),  # parsed as infinity
        ('{"content": "x", "importance": 1e400}', "body.importance"),
    ],
)
async def test_a_number_too_large_for_a_float_is_422(client, ns, body, field) -> None:
    assert_problem(await send(client, "POST", M, body), 422, field)
    await assert_nothing_written(client, ns)


@pytest.mark.parametrize("value", [2**64 + 1, -(2**63) - 1, math.nan, math.inf])
def test_the_models_refuse_them_for_every_way_in_that_builds_them_from_python(value) -> None:
    # MCP's arguments and htm import's lines reach the same models as Python values.
    with pytest.raises(ValidationError, match="metadata"):
        MemoryCreate.model_validate({"content": "x", "metadata": {"v": [value]}})
    with pytest.raises(ValidationError, match="metadata"):
        MessagesAppend.model_validate(
            {"messages": [{"role": "user", "content": "x", "metadata": {"v": value}}]}
        )


async def test_mcp_remember_refuses_such_an_integer(live_server_factory, app_factory) -> None:
    base = live_server_factory()
    ns = f"t-{uuid.uuid4().hex[:10]}"
    async with mcp_session(base, **{"X-Namespace": ns}) as s:
        remember = {"robot": "a", "content": "x", "metadata": {"n": 2**64 + 1}}
        r = await s.call_tool("remember", remember)
        assert r.is_error
        assert "outside the signed 64-bit range at n" in r.content[0].text  # type: ignore[union-attr]
    async with httpx2.AsyncClient(base_url=base, headers={"X-Namespace": ns}) as http:
        assert (await http.get("/v1/robots")).json() == []


async def test_htm_import_refuses_such_an_integer_and_imports_nothing(client, tmp_path) -> None:
    from app.transfer.importer import import_file
    from app.transfer.reading import BadFile

    ns = f"t-{uuid.uuid4().hex[:10]}"
    header = {"format": "htm-export", "version": 1, "namespace": "x", "model": None,
              "dimension": 384, "exported_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    good = {"key": "k1", "content": "fine", "author": "r", "created_at": "2025-01-01T00:00:00Z"}
    path = tmp_path / "big.jsonl"
    bad = json.dumps({**good, "key": "k2", "metadata": {"n": 0}}).replace('"n": 0', f'"n": {BIG}')
    path.write_text("\n".join([json.dumps(header), json.dumps(good), bad]) + "\n")
    with pytest.raises(BadFile, match=r"big.jsonl:3: .*outside the signed 64-bit range at n"):
        await import_file(client.app.state.components, path, ns)  # type: ignore[attr-defined]
    client.headers["X-Namespace"] = ns
    await assert_nothing_written(client, ns)
