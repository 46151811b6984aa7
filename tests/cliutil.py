"""Helpers for tests that run the CLI in-process (the `fade` fixture is in conftest.py)."""


def one_line(stderr: str) -> str:
    """stderr's one line, asserting there is exactly one."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]
