"""Profiles: named slots about a subject, each slot a memory (type `fact`, metadata `subject`,
`attribute`, `profile`), so supersede chains, history and versions apply to them."""
