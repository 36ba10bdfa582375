"""Vectors as the database keeps them, so that expected similarities are exact under either
storage (HTM_VECTOR_STORAGE, read when the suite's databases are migrated; `make test` runs
on the default, halfvec, and HTM_VECTOR_STORAGE=vector make test on float32): `vector` keeps
float32, `halfvec` rounds each float32 to the nearest float16 (ties to even), as pgvector's
text input does (strtof, then half). Similarities are then computed in float64 over those
values, which is what pgvector's own float arithmetic approximates to ~1e-7."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.config import get_settings

# The suite migrates fresh databases: `auto` makes them halfvec (pgvector >= 0.7, as on the
# embedded server and the compose image).
STORAGE = "vector" if get_settings().vector_storage == "vector" else "halfvec"
HALF = STORAGE == "halfvec"
# pg_column_size of one stored 384-dimension embedding: a 4-byte varlena header, then
# dim and unused (2 bytes each), then the elements.
ELEMENT_BYTES = 2 if HALF else 4


def as_stored(v: Sequence[float] | np.ndarray) -> np.ndarray:
    """The vector's elements as stored, as float64 (rows of a matrix alike)."""
    a = np.asarray(v, dtype=np.float32)
    return (a.astype(np.float16) if HALF else a).astype(np.float64)


def similarity(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cosine similarity of the two vectors as stored."""
    x, y = as_stored(a), as_stored(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def column_type(dim: int) -> str:
    """The embedding column's type as format_type prints it."""
    return f"{STORAGE}({dim})"
