"""The one protocol every chat model (LLM) provider implements, and the error they all raise.

Callers treat `LlmError` as "no answer now": the work that needed it (a memory's enrichment,
an eviction summary) stays pending and is tried again later, so providers must never raise
anything else for a provider-side failure.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": text}


class LlmError(Exception):
    """Any failure to get an answer: transport, HTTP status, timeout, bad shape.

    transient: the provider could not answer now (unreachable, timed out, overloaded, 5xx,
    429); otherwise it answered but refused the request or answered something unusable, and
    the same request may fail again.
    """

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


@runtime_checkable
class ChatModel(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def complete(self, messages: list[Message], *, json: bool = False) -> str:
        """The assistant's reply to `messages`; with `json`, the provider is asked for a JSON
        object (the caller still validates it)."""
        ...

    async def aclose(self) -> None: ...


def reply_json(text: str) -> Any:
    """A model's JSON reply, tolerating a fenced code block around it; LlmError (not
    transient) when it is not JSON."""
    import json

    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        return json.loads(body)
    except ValueError as exc:
        raise LlmError(f"the model's reply is not JSON: {text[:200]!r}", transient=False) from exc
