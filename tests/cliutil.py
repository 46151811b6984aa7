"""Helpers for tests that run the CLI in-process (the `fade` fixture is in conftest.py)."""


def one_line(stderr: str) -> str:
    """stderr's one line, asserting there is exactly one."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def load_benchmark(name: str):
    """benchmarks/<name>.py imported as a module (the harness scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
