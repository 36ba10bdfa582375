"""`htm` as a subprocess (the fixture of tests/transfer)."""

from tests.transfer.conftest import htm  # noqa: F401
