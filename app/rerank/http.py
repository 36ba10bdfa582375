"""An HTTP reranker in either common shape: text-embeddings-inference's `POST /rerank`
{query, texts} → [{index, score}], or the Cohere shape that Jina, vLLM, Infinity and LiteLLM
also speak, {model, query, documents} → {results: [{index, relevance_score}]}. Every failure
is a RerankError: recall then keeps its fused order (a reranker is an improvement, never a
dependency)."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, Literal

from app.tracing import dependency

if TYPE_CHECKING:  # imported where a client is made (app/provider_http.py says why)
    import httpx

RerankApi = Literal["tei", "cohere"]


class RerankError(Exception):
    pass


class HttpReranker:
    def __init__(
        self,
        url: str,
        *,
        api: RerankApi = "cohere",
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx

        self.url = url
        self.api = api
        self.model = model
        self.timeout_s = timeout_s
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        self._client = httpx.AsyncClient(timeout=timeout_s, headers=headers, transport=transport)

    async def scores(self, query: str, documents: list[str]) -> list[float]:
        """One relevance score per document, in the documents' order."""
        if not documents:
            return []
        import httpx

        body: dict[str, Any]
        if self.api == "tei":
            body = {"query": query, "texts": documents}
        else:
            body = {"query": query, "documents": documents, "top_n": len(documents)}
            if self.model:
                body["model"] = self.model
        try:
            async with asyncio.timeout(self.timeout_s):
                with dependency("reranker", documents=len(documents)):
                    response = await self._client.post(self.url, json=body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise RerankError(
                f"reranker at {self.url} timed out after {self.timeout_s:g}s"
            ) from exc
        except httpx.HTTPError as exc:
            raise RerankError(f"reranker at {self.url} failed: {type(exc).__name__}") from exc
        if response.is_error:
            raise RerankError(f"reranker at {self.url} returned HTTP {response.status_code}")
        try:
            return _scores(response.json(), len(documents))
        except (ValueError, KeyError, TypeError) as exc:
            raise RerankError(
                f"reranker at {self.url} returned an unreadable answer: {exc}"
            ) from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _scores(payload: Any, count: int) -> list[float]:
    """Scores by index from either answer shape; every document must be scored once."""
    items = payload["results"] if isinstance(payload, dict) else payload
    found: dict[int, float] = {}
    for item in items:
        index = int(item["index"])
        score = float(item["relevance_score"] if "relevance_score" in item else item["score"])
        if not 0 <= index < count or index in found or not math.isfinite(score):
            raise ValueError(f"bad result {item!r}")
        found[index] = score
    if len(found) != count:
        raise ValueError(f"{len(found)} scores for {count} documents")
    return [found[i] for i in range(count)]
