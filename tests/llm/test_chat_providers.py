"""The chat providers against a real local HTTP server speaking each API: request shape,
reply parsing, and every failure an LlmError (transient or not)."""

from __future__ import annotations

import pytest

from app.llm.base import LlmError, reply_json
from app.llm.factory import build_llm
from app.llm.http import OllamaChat, OpenAIChat
from tests.conftest import make_settings

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


async def test_openai_request_and_reply(stub) -> None:
    stub.reply = lambda _r: (
        200,
        {"choices": [{"message": {"role": "assistant", "content": "Hello"}}]},
    )
    llm = OpenAIChat("gpt-x", base_url=stub.url + "/v1", api_key="sk-1")
    try:
        assert await llm.complete(MESSAGES) == "Hello"
        assert await llm.complete(MESSAGES, json=True) == "Hello"
    finally:
        await llm.aclose()
    first, second = stub.requests
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer sk-1"
    assert first.body == {"model": "gpt-x", "messages": MESSAGES, "temperature": 0}
    assert second.body["response_format"] == {"type": "json_object"}


async def test_ollama_request_and_reply(stub) -> None:
    stub.reply = lambda _r: (200, {"message": {"role": "assistant", "content": '{"a": 1}'}})
    llm = OllamaChat("llama3", base_url=stub.url)
    try:
        assert reply_json(await llm.complete(MESSAGES, json=True)) == {"a": 1}
    finally:
        await llm.aclose()
    [req] = stub.requests
    assert req.path == "/api/chat"
    assert req.body == {
        "model": "llama3",
        "messages": MESSAGES,
        "stream": False,
        "options": {"temperature": 0},
        "format": "json",
    }
    assert "authorization" not in req.headers


@pytest.mark.parametrize(
    ("status", "body", "transient"),
    [
        (503, {"error": "overloaded"}, True),
        (429, {"error": "slow down"}, True),
        (400, {"error": "bad model"}, False),
        (200, {"choices": []}, False),
        (200, {"unexpected": True}, False),
    ],
)
async def test_failures_are_llm_errors(stub, status, body, transient) -> None:
    stub.reply = lambda _r: (status, body)
    llm = OpenAIChat("m", base_url=stub.url)
    try:
        with pytest.raises(LlmError) as caught:
            await llm.complete(MESSAGES)
    finally:
        await llm.aclose()
    assert caught.value.transient is transient


async def test_a_slow_server_times_out_as_transient(stub) -> None:
    stub.delay_s = 1.0
    llm = OllamaChat("m", base_url=stub.url, timeout_s=0.2)
    try:
        with pytest.raises(LlmError, match=r"timed out after 0\.2s") as caught:
            await llm.complete(MESSAGES)
    finally:
        await llm.aclose()
    assert caught.value.transient is True


def test_reply_json_takes_a_fenced_block_and_refuses_prose() -> None:
    assert reply_json('```json\n{"tags": ["a"]}\n```') == {"tags": ["a"]}
    with pytest.raises(LlmError) as caught:
        reply_json("Sure! Here are your tags: a, b")
    assert caught.value.transient is False


def test_the_factory_builds_nothing_without_a_provider() -> None:
    assert build_llm(make_settings("postgresql+asyncpg://x/y", "redis://x")) is None
    with pytest.raises(ValueError, match="HTM_LLM_PROVIDER=ollama needs HTM_LLM_URL"):
        build_llm(make_settings("postgresql+asyncpg://x/y", "redis://x", llm_provider="ollama"))
