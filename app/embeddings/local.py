"""sentence-transformers in-process: the packaged models by name (`packaged.py`: the default
all-MiniLM-L6-v2, and all-mpnet-base-v2), or any sentence-transformers model folder by path."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import app.embeddings.packaged as packaged
from app.config import Settings
from app.embeddings.base import EmbeddingError
from app.embeddings.in_process import InProcessModel, dimension_mismatch

BUNDLED_MODEL = packaged.MINILM
# A packaged model unpacked from its packages (all-mpnet-base-v2) goes under this folder unless
# the caller names another (the factory: HTM_DATA_DIR/models).
DEFAULT_MODELS_DIR = Settings.model_fields["data_dir"].default / "models"


def _load(model: str, models_dir: Path, threads: int | None) -> Any:
    """Load a SentenceTransformer (blocking: run it in a thread)."""
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding provider needs sentence-transformers; install the 'local' extra"
        ) from exc
    if threads is not None:
        # Process-wide: the model is torch's only user in the service.
        torch.set_num_threads(threads)
    source = packaged.resolve(model, models_dir)
    # A path that is not there would otherwise be taken for a hub name, and fail as one.
    is_path = os.path.isabs(source) or source.startswith(".")
    if packaged.canonical(model) is None and is_path and not os.path.isdir(source):
        raise EmbeddingError(
            f"local embedding model {model!r} could not be loaded: no such directory"
        )
    return SentenceTransformer(source, device="cpu")


def _dimension_of(st_model: Any) -> int | None:
    # sentence-transformers renamed this method; accept either spelling.
    if hasattr(st_model, "get_embedding_dimension"):
        return st_model.get_embedding_dimension()
    return st_model.get_sentence_embedding_dimension()


class LocalEmbedder(InProcessModel):
    """A sentence-transformers model run on CPU in this process.

    Build it with `await LocalEmbedder.create(...)`. Inference runs on one dedicated thread:
    torch parallelises each batch internally, and a single thread keeps batches from
    competing for the same cores while the event loop stays free.
    """

    runtime = "torch"

    def __init__(self, model: str, dimension: int, st_model: Any) -> None:
        super().__init__(model, dimension)
        self._st_model = st_model

    @classmethod
    async def create(
        cls,
        model: str = BUNDLED_MODEL,
        dimension: int = 384,
        *,
        models_dir: Path | None = None,
        threads: int | None = None,
    ) -> LocalEmbedder:
        """Load the model off the event loop and check it yields `dimension`-sized vectors
        (DimensionMismatch otherwise: the service does not start)."""
        where = DEFAULT_MODELS_DIR if models_dir is None else models_dir
        try:
            st_model = await asyncio.to_thread(_load, model, where, threads)
        except EmbeddingError:
            raise
        except Exception as exc:  # missing files, unknown hub id while offline, bad weights
            raise EmbeddingError(
                f"local embedding model {model!r} could not be loaded: {exc}"
            ) from exc
        actual = _dimension_of(st_model)
        if actual != dimension:
            raise dimension_mismatch(model, actual or 0, dimension)
        # Both spellings of a packaged model are one model: record one name with the vectors.
        name = packaged.canonical(model) or model
        return cls(name, dimension, st_model)

    @property
    def threads(self) -> int:
        import torch

        return int(torch.get_num_threads())

    def _encode(self, texts: list[str]) -> Any:
        return self._st_model.encode(
            texts, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
