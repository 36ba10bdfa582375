"""Any OpenAI-compatible embeddings server, POST /v1/embeddings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.embeddings._http import HttpEmbedder

if TYPE_CHECKING:  # imported where a client is made (app/provider_http.py says why)
    import httpx

DEFAULT_OPENAI_URL = "https://api.openai.com"


class OpenAIEmbedder(HttpEmbedder):
    """POST {base_url}/v1/embeddings {"model", "input": [texts]} with a Bearer key.

    The base URL may be given with or without its trailing /v1 (people paste both forms).
    Without an API key no Authorization header is sent, for local servers that need none.
    """

    provider = "openai"
    path = "/v1/embeddings"

    def __init__(
        self,
        model: str,
        dimension: int,
        *,
        base_url: str = DEFAULT_OPENAI_URL,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base_url = base_url.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        super().__init__(
            model,
            dimension,
            base_url=base_url,
            timeout_s=timeout_s,
            headers=headers,
            transport=transport,
        )

    def request_body(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts}

    def vectors_from(self, payload: Any, count: int) -> Any:
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise self.bad_response('a body without a "data" list')
        by_index: dict[int, Any] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if type(index) is not int or "embedding" not in item:
                raise self.bad_response('a "data" item without an integer "index" and "embedding"')
            by_index[index] = item["embedding"]
        # The API does not promise input order; "index" is the only link back to the text.
        if sorted(by_index) != list(range(count)) or len(data) != count:
            raise self.bad_response(f"indexes {sorted(by_index)} for {count} texts")
        return [by_index[i] for i in range(count)]
