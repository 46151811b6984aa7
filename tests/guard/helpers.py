"""Small helpers shared by the guard tests.

Lines a guard should report carry a comment `# SITE <name>`; `at("<name>")` finds that line in the calling
test file, so no test hard-codes a line number.
"""

import inspect


def line_of(path, marker: str) -> int:
    """The 1-based line of `path` that ends with `marker` (exactly one must)."""
    with open(path) as f:
        lines = [number for number, text in enumerate(f.read().splitlines(), start=1) if text.rstrip().endswith(marker)]
    assert len(lines) == 1, f"{marker!r} found on lines {lines} of {path}"
    return lines[0]


def at(name: str, path=None) -> tuple[str, int]:
    """(file, line) of the line marked `# SITE <name>` in `path` (default: the calling file)."""
    path = path or inspect.stack()[1].filename
    return str(path), line_of(path, "# SITE " + name)


def found(report) -> dict:
    """{(what, file, line): count} for every record of a report."""
    return {(r.what, r.file, r.line): r.count for r in report.records}
