"""HTM service: a two-tier memory service for LLM agents."""
