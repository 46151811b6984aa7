"""Reading a file FADE did not write itself, the one reader every input goes through: a trust boundary with limits.

A results file, a snapshot, a tuning file, a profile summary, a rules file, a journal or a cache may come from
anyone (issue 30: a FIFO hung every reader, /dev/zero ended in MemoryError, JSON nested 100,000 deep raised
RecursionError, a 5,000-digit integer and 1e400 got through to the renderers). So before any parsing:
- the path must name a regular file (os.stat, then an O_NONBLOCK open and fstat of what was opened: a FIFO, a
  device or a directory is refused at once, and a file swapped in between is caught by the fstat);
- at most `max_bytes` are read (a larger file is refused, not truncated);
- JSON is parsed with numbers bounded: no NaN or Infinity literals, no float that overflows to inf (1e400), no
  integer longer than MAX_INT_DIGITS digits; nesting deeper than MAX_DEPTH is refused before json recurses.
Every refusal is an UnreadableFile (a FadeUsageError: one line naming the file and what is wrong, exit 2).
Readers then check their own schema on the parsed value (results.validate_record and the like).
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from typing import Any, Optional, Union

from fade.errors import FadeUsageError

MAX_BYTES = 256 * 2**20  # 256 MiB: larger than any results file FADE writes in a day of benchmarks; /dev/zero is not
MAX_DEPTH = 64  # FADE's own documents nest at most ~8 deep; json's C parser recurses and overflows past ~10,000
MAX_INT_DIGITS = 40  # 128-bit values fit in 39 digits (KFD properties are 64-bit); Python refuses >4300 anyway
# Floats a reader computes with are 0 or lie in FLOAT_MIN..FLOAT_MAX in magnitude: the plots multiply and divide
# up to three of them (value * median_s / q1_s) and scale axis limits by small factors, so within these bounds
# no figure overflows to inf ("Axis limits cannot be NaN or Inf"); no measurement comes near either bound.
FLOAT_MIN, FLOAT_MAX = 1e-100, 1e100
NUMBER = (int, float)  # a JSON number (true/false is not one)


class UnreadableFile(FadeUsageError):
    """A file that cannot be read as asked: not a regular file, too large, not UTF-8, not JSON within the limits."""


def read_bytes(path: Union[str, os.PathLike], *, what: str = "file", max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes`; UnreadableFile otherwise (never a hang on a
    FIFO or a device: the open does not block and what was opened must be a regular file)."""
    name = str(path)
    try:
        before = os.stat(name)
    except FileNotFoundError:
        raise UnreadableFile(f"{what} {name}: no such file") from None
    except OSError as error:
        raise UnreadableFile(f"{what} {name}: cannot read it ({error.strerror or error})") from None
    if not stat.S_ISREG(before.st_mode):
        raise UnreadableFile(f"{what} {name}: not a regular file ({_kind(before.st_mode)})")
    try:
        descriptor = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise UnreadableFile(f"{what} {name}: cannot read it ({error.strerror or error})") from None
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            raise UnreadableFile(f"{what} {name}: not a regular file ({_kind(opened.st_mode)})")
        if opened.st_size > max_bytes:
            raise UnreadableFile(f"{what} {name}: {opened.st_size} bytes, more than the {max_bytes} this reader takes")
        chunks, total = [], 0
        while True:
            chunk = os.read(descriptor, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise UnreadableFile(f"{what} {name}: more than the {max_bytes} bytes this reader takes")
        return b"".join(chunks)
    except OSError as error:
        raise UnreadableFile(f"{what} {name}: cannot read it ({error.strerror or error})") from None
    finally:
        os.close(descriptor)


def read_text(path: Union[str, os.PathLike], *, what: str = "file", max_bytes: int = MAX_BYTES) -> str:
    """read_bytes decoded as UTF-8; UnreadableFile for other bytes."""
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{what} {path}: not UTF-8 text (byte {error.start})") from None


def parse_json(text: str, *, what: str = "JSON", max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with the module's limits; UnreadableFile (one line) for anything outside them."""
    depth = nesting_depth(text, max_depth)
    if depth > max_depth:
        raise UnreadableFile(f"{what}: nested too deeply (JSON nested deeper than the {max_depth} levels FADE reads)")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=finite_float, parse_int=_bounded_int)
    except UnreadableFile as error:  # a number hook's refusal: say which document
        raise UnreadableFile(f"{what}: {error}") from None
    except json.JSONDecodeError as error:
        where = f"column {error.colno}" if error.lineno == 1 else f"line {error.lineno}, column {error.colno}"
        raise UnreadableFile(f"{what}: not valid JSON ({error.msg}; {where})") from None
    except ValueError as error:  # Python's own limits (int() of a long digit string)
        raise UnreadableFile(f"{what}: not valid JSON ({error})") from None


def gunzip(data: bytes, *, what: str = "file", max_bytes: int = MAX_BYTES) -> bytes:
    """The gzip stream `data` decompressed (every member), at most `max_bytes`: a small file that inflates
    past the cap (a gzip bomb) is refused like a large file."""
    import zlib

    out, total = [], 0
    while data:
        inflater = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
        try:
            chunk = inflater.decompress(data, max_bytes + 1 - total)
        except zlib.error as error:
            raise UnreadableFile(f"{what}: a damaged gzip file ({error})") from None
        total += len(chunk)
        out.append(chunk)
        if total > max_bytes or inflater.unconsumed_tail:
            raise UnreadableFile(f"{what}: more than the {max_bytes} bytes this reader takes once decompressed")
        if not inflater.eof:
            raise UnreadableFile(f"{what}: a damaged gzip file (it ends early)")
        data = inflater.unused_data.lstrip(b"\0")  # the next member, if any (padding between members is NUL)
    return b"".join(out)


def read_json(path: Union[str, os.PathLike], *, what: str = "file", max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:  # fmt: skip
    """The JSON document in the regular file at `path`, within the module's limits."""
    return parse_json(read_text(path, what=what, max_bytes=max_bytes), what=f"{what} {path}", max_depth=max_depth)


@dataclass(frozen=True)
class Maybe:
    """In a schema: a key that may be missing or null; when present, `spec` holds."""

    spec: Any


@dataclass(frozen=True)
class MapOf:
    """In a schema: an object whose every value holds `spec`; `keys` limits the names when given."""

    spec: Any
    keys: Optional[tuple] = None


def schema_problem(value: Any, spec: Any, where: str = "") -> Optional[str]:
    """The first place where the parsed JSON `value` does not hold `spec`, as one line; None when it does.

    A spec is a type or a tuple of types (NUMBER: int or float, never bool unless named), a dict {key: spec}
    (an object with those keys; other keys pass unread), [spec] (an array of such items), Maybe(spec) or
    MapOf(spec, keys). Floats must be 0 or within FLOAT_MIN..FLOAT_MAX in magnitude.
    """
    if isinstance(spec, Maybe):
        return None if value is None else schema_problem(value, spec.spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where or 'the document'} is {_json_kind(value)}, expected an object"
        for key, inner in spec.items():
            if key not in value and not isinstance(inner, Maybe):
                return f"{_join(where, key)} is missing"
            problem = schema_problem(value.get(key), inner, _join(where, key))
            if problem:
                return problem
        return None
    if isinstance(spec, (list, MapOf)):
        if not isinstance(value, list if isinstance(spec, list) else dict):
            return f"{where or 'the document'} is {_json_kind(value)}, expected an {'array' if isinstance(spec, list) else 'object'}"
        items = enumerate(value) if isinstance(spec, list) else value.items()
        for key, item in items:
            if isinstance(spec, MapOf) and spec.keys is not None and key not in spec.keys:
                return f"{where} names {key[:40]!r}, none of {', '.join(spec.keys)}"
            inner = spec[0] if isinstance(spec, list) else spec.spec
            problem = schema_problem(item, inner, f"{where}[{key}]" if isinstance(spec, list) else _join(where, key))
            if problem:
                return problem
        return None
    types = spec if isinstance(spec, tuple) else (spec,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", dict: "an object",
                 list: "an array", type(None): "null"}  # fmt: skip
        expected = "a number" if set(types) >= set(NUMBER) else " or ".join(names.get(kind, kind.__name__) for kind in types)
        return f"{where} is {_json_kind(value)}, expected {expected}"
    if isinstance(value, float) and value and not FLOAT_MIN <= abs(value) <= FLOAT_MAX:
        return f"{where} is {value:g}, outside the {FLOAT_MIN:g}..{FLOAT_MAX:g} FADE computes with"
    return None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _json_kind(value) -> str:
    return {type(None): "null", bool: "true/false", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)  # fmt: skip


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a plain file"


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of [ and { outside strings: a linear scan, so a hostile depth never reaches json.
    Text with at most `limit` brackets in all cannot nest deeper, and skips the scan (most lines of a file)."""
    if text.count("[") + text.count("{") <= limit:
        return 0
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:  # enough to refuse it: no need to read a hostile document to its end
                return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str):
    raise UnreadableFile(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def finite_float(text: str) -> float:
    """float(text), refused when it overflows to inf or is NaN (a parse_float hook for json and tomllib)."""
    value = float(text)
    if not math.isfinite(value):
        raise UnreadableFile(f"number {text[:40]} is out of range (it reads as {value})")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise UnreadableFile(f"JSON integer of {digits} digits: more than the {MAX_INT_DIGITS} FADE reads")
    return int(text)


__all__ = ["UnreadableFile", "read_bytes", "read_text", "parse_json", "read_json", "gunzip", "nesting_depth",
           "finite_float", "schema_problem", "Maybe", "MapOf", "NUMBER", "FLOAT_MIN", "FLOAT_MAX", "MAX_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS"]
