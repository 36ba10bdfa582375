"""The entity tests run `htm` as the transfer tests do (export, import)."""

from tests.transfer.conftest import htm

__all__ = ["htm"]
