"""What every call to a third-party HTTP provider shares (embedding servers, chat models):
one deadline for the whole request, and every failure raised as the caller's error class,
marked transient (unreachable, timed out, 5xx, 408, 429: the provider could not answer now)
or not (any other 4xx: it refused this request)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

# httpx is imported where a client is made or an error caught, not here: `import httpx`
# imports its command-line module too (click, rich, pygments' lexers: ~0.2 s), which every
# `htm` command would pay through these modules (encode/httpx#3547).
if TYPE_CHECKING:
    import httpx


class ProviderError(Protocol):
    def __call__(self, message: str, *, transient: bool = ...) -> Exception: ...


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    timeout_s: float,
    where: str,
    error: ProviderError,
    bad_body_transient: bool,
) -> Any:
    """POST `body` and return the reply's JSON. `where` names the request in messages; a
    reply that is not JSON is transient or not as `bad_body_transient` says."""
    import httpx

    try:
        # httpx's timeout is per phase (connect, each read, ...); a slow-dripping server
        # could exceed it many times over, so the whole request also gets one deadline.
        async with asyncio.timeout(timeout_s):
            response = await client.post(url, json=body)
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise error(f"{where} timed out after {timeout_s:g}s", transient=True) from exc
    except httpx.HTTPError as exc:
        raise error(f"{where} failed: {type(exc).__name__}: {exc}", transient=True) from exc
    if response.is_error:
        status = response.status_code
        raise error(
            f"{where} returned HTTP {status}: {response.text[:300].strip()}",
            transient=status >= 500 or status in (408, 429),
        )
    try:
        return response.json()
    except ValueError as exc:
        raise error(
            f"{where} returned a body that is not JSON", transient=bad_body_transient
        ) from exc
