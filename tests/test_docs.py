"""The docs are what the code says they are."""

from __future__ import annotations


def test_the_configuration_page_is_what_the_settings_generate() -> None:
    from app.config_docs import DOC_PATH, render

    assert DOC_PATH.read_text() == render(), "docs/configuration.md is stale: run `make docs`"
