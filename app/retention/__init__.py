"""Retention that archives: a namespace's policies, what they would archive, and archiving it
through the write protocol (an archive is a soft delete that names its rule)."""
