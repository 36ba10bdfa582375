"""The bench's HTTP client: one pooled client on the bench's one event loop.

aiohttp when it is installed (`make bench` installs it), httpx otherwise. The reason is CPU:
on the 2-core machine this bench was written on, httpx.AsyncClient spent 1.5–2.1 ms of CPU per
request against GET /healthz (c=1 and c=8) and capped it at ~450 requests/s, about as much
CPU as the service spent answering; aiohttp spent 0.15–0.22 ms and reached 2,000–4,400/s.
On two cores every millisecond the client burns is taken from the service, so httpx would
have measured the client. Which client ran is recorded in the results.
"""

from __future__ import annotations

import json as jsonlib
from typing import Any

try:
    import aiohttp
except ImportError:  # pragma: no cover - exercised when aiohttp is absent
    aiohttp = None  # type: ignore[assignment]

import httpx


class Response:
    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class Http:
    """`async with Http(base_url, connections) as c: r = await c.post(path, json=...)`."""

    def __init__(self, base_url: str, connections: int, timeout_s: float = 60.0) -> None:
        self.base_url = base_url
        self.connections = connections
        self.timeout_s = timeout_s
        self.name = "aiohttp" if aiohttp is not None else "httpx"
        self._session: Any = None

    async def __aenter__(self) -> Http:
        if aiohttp is not None:
            self._session = aiohttp.ClientSession(
                self.base_url,
                # Idle connections are dropped after 2 s, before uvicorn's 5 s keep-alive
                # timeout closes them under a request (the floor phases leave them idle).
                connector=aiohttp.TCPConnector(limit=self.connections, keepalive_timeout=2.0),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                auto_decompress=False,
            )
        else:
            limits = httpx.Limits(
                max_connections=self.connections, max_keepalive_connections=self.connections
            )
            self._session = httpx.AsyncClient(
                base_url=self.base_url, trust_env=False, timeout=self.timeout_s, limits=limits
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if aiohttp is not None:
            await self._session.close()
        else:
            await self._session.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        if json is not None:
            content = jsonlib.dumps(json).encode()
            headers = {**(headers or {}), "content-type": "application/json"}
        if aiohttp is not None:
            async with self._session.request(method, path, data=content, headers=headers) as r:
                return Response(r.status, await r.read())
        r = await self._session.request(method, path, content=content, headers=headers)
        return Response(r.status_code, r.content)

    async def get(self, path: str) -> Response:
        return await self.request("GET", path)

    async def post(self, path: str, **kw: Any) -> Response:
        return await self.request("POST", path, **kw)

    async def put(self, path: str, **kw: Any) -> Response:
        return await self.request("PUT", path, **kw)
