"""The two HTTP chat providers: any OpenAI-compatible server (POST /v1/chat/completions) and
Ollama (POST /api/chat). One client each, one deadline per request, every failure an LlmError
(5xx, 408, 429, timeouts and transport errors transient; other 4xx and bad bodies not)."""

from __future__ import annotations

from typing import Any, ClassVar

from app.llm.base import LlmError, Message
from app.provider_http import post_json
from app.tracing import dependency


class HttpChatModel:
    provider: ClassVar[str]
    path: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        timeout_s: float,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.url = base_url.rstrip("/") + self.path
        self.timeout_s = timeout_s
        import httpx  # here, not above: app/provider_http.py says why

        self._client = httpx.AsyncClient(timeout=timeout_s, headers=headers)

    async def complete(self, messages: list[Message], *, json: bool = False) -> str:
        payload = await self._post(self.request_body(messages, json))
        text = self.reply_from(payload)
        if not isinstance(text, str):
            raise LlmError(
                f"{self.provider} at {self.url} returned a body without a reply text",
                transient=False,
            )
        return text

    async def aclose(self) -> None:
        await self._client.aclose()

    def request_body(self, messages: list[Message], json: bool) -> dict[str, Any]:
        raise NotImplementedError

    def reply_from(self, payload: Any) -> Any:
        raise NotImplementedError

    async def _post(self, body: dict[str, Any]) -> Any:
        with dependency("llm", **{"gen_ai.request.model": self.model}):
            return await post_json(
                self._client,
                self.url,
                body,
                timeout_s=self.timeout_s,
                where=f"{self.provider} chat request to {self.url}",
                error=LlmError,
                bad_body_transient=False,
            )


class OpenAIChat(HttpChatModel):
    """POST {base}/v1/chat/completions {model, messages, temperature 0[, response_format]}.
    The base URL may end in /v1 or not; no Authorization header without an API key."""

    provider = "openai"
    path = "/v1/chat/completions"

    def __init__(
        self, model: str, *, base_url: str, api_key: str | None = None, timeout_s: float = 30.0
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        super().__init__(
            model,
            base_url=base_url.rstrip("/").removesuffix("/v1"),
            timeout_s=timeout_s,
            headers=headers,
        )

    def request_body(self, messages: list[Message], json: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
        if json:
            body["response_format"] = {"type": "json_object"}
        return body

    def reply_from(self, payload: Any) -> Any:
        try:
            return payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return None


class OllamaChat(HttpChatModel):
    """POST {base}/api/chat {model, messages, stream false, options.temperature 0[, format]}."""

    provider = "ollama"
    path = "/api/chat"

    def __init__(self, model: str, *, base_url: str, timeout_s: float = 30.0) -> None:
        super().__init__(model, base_url=base_url, timeout_s=timeout_s)

    def request_body(self, messages: list[Message], json: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": False,
            "options": {"temperature": 0},
        }
        if json:
            body["format"] = "json"
        return body

    def reply_from(self, payload: Any) -> Any:
        try:
            return payload["message"]["content"]
        except (KeyError, TypeError):
            return None
