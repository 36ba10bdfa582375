"""Summaries of what working memory evicts: extractive, written by a background worker."""
