"""What the two in-process runtimes of the local model share (torch: `local.py`, ONNX
Runtime: `onnx_model.py`): one dedicated inference thread, so the event loop stays free and
batches never compete with each other for the cores, and unit vectors out."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.embeddings.base import DimensionMismatch, EmbeddingError, unit_vectors


def dimension_mismatch(model: str, actual: int, dimension: int) -> DimensionMismatch:
    return DimensionMismatch(
        f"local embedding model {model!r} produces {actual}-dimensional vectors, but "
        f"embedding_dimension is {dimension}: set HTM_EMBEDDING_DIMENSION={actual} "
        "for a new database, or use the model this database was built with"
    )


class InProcessModel:
    """An embedder whose `_encode(texts)` runs the model (blocking) on its own thread."""

    provider = "local"

    def __init__(self, model: str, dimension: int) -> None:
        self.model = model
        self.dimension = dimension
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="htm-embed")
        self._closed = False

    def _encode(self, texts: list[str]) -> Any:
        raise NotImplementedError

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._closed:
            raise EmbeddingError("the local embedder is closed")
        loop = asyncio.get_running_loop()
        try:
            raw = await loop.run_in_executor(self._executor, self._encode, list(texts))
        except Exception as exc:
            raise EmbeddingError(
                f"local embedding model {self.model!r} failed: {exc}", transient=False
            ) from exc
        return unit_vectors(
            raw, count=len(texts), dimension=self.dimension, source=f"local model {self.model!r}"
        )

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Let a running batch finish without blocking the loop while it does.
        await asyncio.to_thread(self._executor.shutdown, wait=True)
