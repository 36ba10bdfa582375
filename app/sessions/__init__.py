"""Sessions: a robot's conversations, the short-term tier between working and long-term
memory (appended messages with a TTL, a hot window in Redis, consolidation at the end)."""
