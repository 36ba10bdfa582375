"""HTM service: a two-tier memory service for LLM agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The one version (pyproject.toml): the package's and the API's (OpenAPI info.version).
    VERSION = version("htm-service")
except PackageNotFoundError:  # a source tree that was never installed
    VERSION = "0+unknown"
