"""Fixtures shared by the LLM tests."""

import pytest


@pytest.fixture(scope="module")
def shape():
    """tiny-llama's config (the bundled shape every CPU test of the decode paths runs)."""
    from fade.analyze.llm_table import resolve_config

    return resolve_config("tiny-llama")
