"""What the HTTP providers share: one client, one deadline, every failure an EmbeddingError."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import httpx

from app.embeddings.base import EmbeddingError, unit_vectors


class HttpEmbedder:
    """Base of the providers that POST texts to a server and read vectors back."""

    provider: ClassVar[str]
    path: ClassVar[str]

    def __init__(
        self,
        model: str,
        dimension: int,
        *,
        base_url: str,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.dimension = dimension
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + self.path
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(timeout=timeout_s, headers=headers, transport=transport)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        payload = await self._post(self.request_body(texts))
        return unit_vectors(
            self.vectors_from(payload, len(texts)),
            count=len(texts),
            dimension=self.dimension,
            source=f"{self.provider} model {self.model!r}",
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def request_body(self, texts: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def vectors_from(self, payload: Any, count: int) -> Any:
        raise NotImplementedError

    def bad_response(self, what: str) -> EmbeddingError:
        return EmbeddingError(f"{self.provider} at {self.url} returned {what}")

    async def _post(self, body: dict[str, Any]) -> Any:
        where = f"{self.provider} embedding request to {self.url}"
        try:
            # httpx's timeout is per phase (connect, each read, ...); a slow-dripping server
            # could exceed it many times over, so the whole request also gets one deadline.
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(self.url, json=body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise EmbeddingError(f"{where} timed out after {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
        if response.is_error:
            snippet = response.text[:300].strip()
            # 4xx (but timeouts and rate limits) refuses these texts; 5xx is the server's.
            status = response.status_code
            raise EmbeddingError(
                f"{where} returned HTTP {status}: {snippet}",
                transient=status >= 500 or status in (408, 429),
            )
        try:
            return response.json()
        except ValueError as exc:
            raise EmbeddingError(f"{where} returned a body that is not JSON") from exc
