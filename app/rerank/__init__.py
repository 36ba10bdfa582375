"""Rerankers: an optional HTTP provider that reorders recall's top candidates."""

from app.rerank.http import HttpReranker, RerankError

__all__ = ["HttpReranker", "RerankError"]
