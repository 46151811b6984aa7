import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def fixture_snapshot():
    return load_fixture
