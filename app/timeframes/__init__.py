"""Natural-language timeframes ("last week", "2025-03", "since monday"): parse.py turns
text into a half-open instant range; http.py is how the API takes and reports them. Shared by
memories (listing) and recall (filtering)."""
