import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def fixture_snapshot():
    return load_fixture


@pytest.fixture
def fade(capsys):
    """Run `fade ARGS...` in-process -> (exit code, stdout, stderr)."""
    from fade import cli

    def run(*argv):
        code = cli.main([str(arg) for arg in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
