"""Embedding providers behind one protocol, with micro-batching in front of them."""

from app.embeddings.base import Embedder, EmbeddingError, unit_vectors
from app.embeddings.batcher import MicroBatcher
from app.embeddings.factory import build_embedder, describe
from app.embeddings.local import LocalEmbedder
from app.embeddings.ollama import DEFAULT_OLLAMA_URL, OllamaEmbedder
from app.embeddings.openai import DEFAULT_OPENAI_URL, OpenAIEmbedder

__all__ = [
    "DEFAULT_OLLAMA_URL",
    "DEFAULT_OPENAI_URL",
    "Embedder",
    "EmbeddingError",
    "LocalEmbedder",
    "MicroBatcher",
    "OllamaEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
    "describe",
    "unit_vectors",
]
