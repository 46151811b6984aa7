"""Classify a GPU kernel name (GEMM, convolution, attention, ...) from the sourced table data/kernels.toml.

Rows are tried in file order and the first match wins (the table's header says why the order matters). A
convolution's direction (fwd, bwd_data, bwd_weight) comes from the row, or else from the table's
[[direction]] rows, or stays None. Pure Python: no torch.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import importlib.resources
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from fade.errors import FadeUsageError

CLASSES = (
    "gemm", "convolution", "attention", "normalization", "elementwise", "reduction", "copy", "communication", "other",
)
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
VENDORS = ("nvidia", "amd", "any")
SYNTAXES = ("regex", "glob")
ROW_KEYS = {"class", "library", "vendor", "patterns", "syntax", "direction", "source", "notes"}
DIRECTION_KEYS = {"direction", "patterns", "source"}


class KernelTableError(FadeUsageError, ValueError):
    """A kernels.toml row is malformed. The message names the file, the row and the fix."""


@dataclass(frozen=True)
class KernelRule:
    kernel_class: str  # one of CLASSES
    library: str  # who emits these kernels: "rocBLAS (Tensile)", "cuDNN", ...
    vendor: str  # "nvidia", "amd" or "any"
    patterns: tuple  # compiled regular expressions (globs are translated)
    direction: Optional[str]  # conv rows whose names all run one direction; else None
    source: str  # where the names were read, with the date
    row: int  # 1-based position among the [[kernel]] rows, for messages


@dataclass(frozen=True)
class KernelClass:
    kernel_class: str  # one of CLASSES; "other" when no row matched
    library: Optional[str]  # the matching row's library, None for "other"
    direction: Optional[str]  # fwd | bwd_data | bwd_weight for convolutions when the name says it, else None

    def to_dict(self) -> dict:
        return {"class": self.kernel_class, "library": self.library, "direction": self.direction}


@dataclass(frozen=True)
class KernelTable:
    rules: tuple  # KernelRule, in match order
    directions: tuple  # (direction, compiled patterns), in match order
    path: str


OTHER = KernelClass("other", None, None)


def load_kernel_table(path=None) -> KernelTable:
    """Read and validate kernels.toml (the bundled one when `path` is None); raises KernelTableError."""
    where = str(path) if path is not None else "fade/data/kernels.toml"
    try:
        if path is None:
            text = importlib.resources.files("fade.data").joinpath("kernels.toml").read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise KernelTableError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise KernelTableError(f"{where}: not valid TOML: {exc}") from exc
    rows = data.get("kernel")
    if not isinstance(rows, list) or not rows:
        raise KernelTableError(f"{where}: no [[kernel]] rows; each row starts with a [[kernel]] header")
    rules = tuple(_parse_rule(row, index, where) for index, row in enumerate(rows, 1))
    directions = tuple(_parse_direction(row, index, where) for index, row in enumerate(data.get("direction") or [], 1))
    return KernelTable(rules=rules, directions=directions, path=where)


@functools.lru_cache(maxsize=1)
def default_table() -> KernelTable:
    """The bundled table, parsed once per process (the file is package data and does not change)."""
    return load_kernel_table()


@functools.lru_cache(maxsize=65536)
def classify_kernel(name: str) -> KernelClass:
    """The class of a kernel name by the bundled table: first matching row wins, "other" if none matches."""
    return classify_with(default_table(), name)


def classify_with(table: KernelTable, name: str) -> KernelClass:
    """classify_kernel against a given table (a user's kernels file, a test's)."""
    for rule in table.rules:
        if any(pattern.search(name) for pattern in rule.patterns):
            direction = rule.direction
            if rule.kernel_class == "convolution" and direction is None:
                direction = _direction_of(table, name)
            return KernelClass(rule.kernel_class, rule.library, direction)
    return OTHER


def _direction_of(table: KernelTable, name: str) -> Optional[str]:
    for direction, patterns in table.directions:
        if any(pattern.search(name) for pattern in patterns):
            return direction
    return None


def _fail(where: str, table: str, index: int, message: str):
    raise KernelTableError(f"{where}: [[{table}]] row {index}: {message}")


def _compile(patterns, syntax: str, where: str, table: str, index: int) -> tuple:
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
        _fail(where, table, index, "'patterns' must be a non-empty list of non-empty strings")
    compiled = []
    for pattern in patterns:
        text = r"\A" + fnmatch.translate(pattern) if syntax == "glob" else pattern  # a glob matches the whole name
        try:
            compiled.append(re.compile(text))
        except re.error as exc:
            _fail(where, table, index, f"pattern {pattern!r} is not a valid regular expression: {exc}")
    return tuple(compiled)


def _parse_rule(row, index: int, where: str) -> KernelRule:
    if not isinstance(row, dict):
        _fail(where, "kernel", index, "is not a table")
    unknown = set(row) - ROW_KEYS
    if unknown:
        key = sorted(unknown)[0]
        hint = difflib.get_close_matches(key, sorted(ROW_KEYS), n=1)
        _fail(where, "kernel", index, f"unknown key {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
    kernel_class = row.get("class")
    if kernel_class not in CLASSES:
        hint = difflib.get_close_matches(str(kernel_class), CLASSES, n=1)
        _fail(where, "kernel", index, f"class {kernel_class!r} is not one of {', '.join(CLASSES)}"
              + (f"; did you mean {hint[0]!r}?" if hint else ""))
    source = row.get("source")
    if not isinstance(source, str) or not source.strip():
        _fail(where, "kernel", index, "needs a non-empty 'source': where the kernel names were read, and when")
    vendor = row.get("vendor", "any")
    if vendor not in VENDORS:
        _fail(where, "kernel", index, f"vendor {vendor!r} is not one of {', '.join(VENDORS)}")
    syntax = row.get("syntax", "regex")
    if syntax not in SYNTAXES:
        _fail(where, "kernel", index, f"syntax {syntax!r} is not one of {', '.join(SYNTAXES)}")
    direction = row.get("direction")
    if direction is not None and (kernel_class != "convolution" or direction not in DIRECTIONS):
        _fail(where, "kernel", index, f"direction {direction!r} is allowed only on convolution rows, as one of "
              + ", ".join(DIRECTIONS))
    library = row.get("library")
    if not isinstance(library, str) or not library:
        _fail(where, "kernel", index, "needs a 'library' (who emits these kernels)")
    patterns = _compile(row.get("patterns"), syntax, where, "kernel", index)
    return KernelRule(kernel_class, library, vendor, patterns, direction, source, index)


def _parse_direction(row, index: int, where: str) -> tuple:
    if not isinstance(row, dict) or set(row) - DIRECTION_KEYS:
        _fail(where, "direction", index, f"keys must be {', '.join(sorted(DIRECTION_KEYS))}")
    if row.get("direction") not in DIRECTIONS:
        _fail(where, "direction", index, f"direction {row.get('direction')!r} is not one of {', '.join(DIRECTIONS)}")
    if not isinstance(row.get("source"), str) or not row["source"].strip():
        _fail(where, "direction", index, "needs a non-empty 'source'")
    return row["direction"], _compile(row.get("patterns"), "regex", where, "direction", index)
