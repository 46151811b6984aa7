"""`fade bench ...` and `fade report`: thin shells over fade.measure and fade.report."""

from __future__ import annotations


def add_verbs(verbs) -> None:
    """Registered by fade.cli.build_parser; filled in as the measurement verbs land."""
