"""Ollama's batch embedding endpoint, POST /api/embed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.embeddings._http import HttpEmbedder

if TYPE_CHECKING:  # imported where a client is made (app/provider_http.py says why)
    import httpx

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"


class OllamaEmbedder(HttpEmbedder):
    """POST {base_url}/api/embed {"model", "input": [texts]} → {"embeddings": [[...], ...]}."""

    provider = "ollama"
    path = "/api/embed"

    def __init__(
        self,
        model: str,
        dimension: int,
        *,
        base_url: str = DEFAULT_OLLAMA_URL,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            model, dimension, base_url=base_url, timeout_s=timeout_s, transport=transport
        )

    def request_body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts}

    def vectors_from(self, payload: Any, count: int) -> Any:
        if not isinstance(payload, dict) or "embeddings" not in payload:
            raise self.bad_response('a body without "embeddings"')
        return payload["embeddings"]
