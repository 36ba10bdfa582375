"""make chaos: see chaos/__main__.py."""
