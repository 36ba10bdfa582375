"""The one protocol every embedding provider implements, and the error they all raise.

Callers treat `EmbeddingError` as "embedding not available right now": the memory is stored
durably as pending and embedded later, so providers must never raise anything else for a
provider-side failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


class EmbeddingError(Exception):
    """Any failure to turn texts into vectors: transport, HTTP status, timeout, bad shape.

    transient: the provider could not answer now (unreachable, timed out, overloaded, 5xx),
    and any texts would have failed alike. Otherwise (transient=False) it answered, but
    refused these texts or returned something unusable for them: the same texts may fail
    again, and a batch is worth splitting to find the ones at fault.
    """

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class DimensionMismatch(EmbeddingError):
    """The model's vectors are not the size the deployment stores: the service must not
    start (every vector it made would be refused, or worse, mixed with another model's)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


@runtime_checkable
class Embedder(Protocol):
    # Read-only members, so class attributes, instance attributes and properties all fit.
    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector of `dimension` floats per text, in input order."""
        ...

    async def aclose(self) -> None: ...


def unit_vectors(raw: Any, *, count: int, dimension: int, source: str) -> list[list[float]]:
    """Validate a provider's vectors and scale them to unit length.

    Cosine search and the stored vectors assume unit length, and a vector of the wrong size
    would only fail later inside Postgres, so both are checked here, at the provider boundary.
    """
    if not isinstance(raw, Sequence | np.ndarray):
        raise EmbeddingError(
            f"{source} returned {type(raw).__name__} instead of a list of vectors", transient=False
        )
    if len(raw) != count:
        raise EmbeddingError(
            f"{source} returned {len(raw)} vectors for {count} texts", transient=False
        )
    for i, row in enumerate(raw):
        if not isinstance(row, list | tuple | np.ndarray):
            raise EmbeddingError(
                f"{source} returned vector {i} as {type(row).__name__}", transient=False
            )
        if len(row) != dimension:
            raise EmbeddingError(
                f"{source} returned a {len(row)}-dimensional vector, but embedding_dimension "
                f"is {dimension}; the model and the configured dimension must match",
                transient=False,
            )
    if count == 0:
        return []
    try:
        arr = np.asarray(raw)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(
            f"{source} returned vectors that are not numeric: {exc}", transient=False
        ) from exc
    if arr.dtype.kind not in "fiu":
        raise EmbeddingError(f"{source} returned vectors that are not numeric", transient=False)
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise EmbeddingError(
            f"{source} returned a vector containing NaN or infinity", transient=False
        )
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbeddingError(
            f"{source} returned an all-zero vector, which has no direction", transient=False
        )
    return (arr / norms).tolist()
