"""Prompt assembly: chat messages across the tiers (the input, a session, working memory,
recall) within an exact token budget, with a manifest of every candidate."""
