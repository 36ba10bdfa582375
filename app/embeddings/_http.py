"""What the HTTP providers share: one client, one deadline, every failure an EmbeddingError."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from app.embeddings.base import EmbeddingError, unit_vectors
from app.provider_http import post_json

if TYPE_CHECKING:  # imported where a client is made (app/provider_http.py says why)
    import httpx


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
        import httpx

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
        # A body that is not JSON (a proxy's or captive portal's page) is the network's
        # doing, not a refusal of these texts: transient.
        return await post_json(
            self._client,
            self.url,
            body,
            timeout_s=self.timeout_s,
            where=f"{self.provider} embedding request to {self.url}",
            error=EmbeddingError,
            bad_body_transient=True,
        )
