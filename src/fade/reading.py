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
from typing import Any, Union

from fade.errors import FadeUsageError

MAX_BYTES = 256 * 2**20  # 256 MiB: larger than any results file FADE writes in a day of benchmarks; /dev/zero is not
MAX_DEPTH = 64  # FADE's own documents nest at most ~8 deep; json's C parser recurses and overflows past ~10,000
MAX_INT_DIGITS = 40  # 128-bit values fit in 39 digits (KFD properties are 64-bit); Python refuses >4300 anyway


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
    depth = _max_depth(text)
    if depth > max_depth:
        raise UnreadableFile(f"{what}: nested {depth} deep, more than the {max_depth} FADE reads")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except UnreadableFile as error:  # a number hook's refusal: say which document
        raise UnreadableFile(f"{what}: {error}") from None
    except ValueError as error:  # json.JSONDecodeError is a ValueError; so are the hooks' refusals
        raise UnreadableFile(f"{what}: not valid JSON ({error})") from None


def read_json(path: Union[str, os.PathLike], *, what: str = "file", max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:  # fmt: skip
    """The JSON document in the regular file at `path`, within the module's limits."""
    return parse_json(read_text(path, what=what, max_bytes=max_bytes), what=f"{what} {path}", max_depth=max_depth)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a plain file"


def _max_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings: a linear scan, so a hostile depth never reaches json."""
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
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str):
    raise UnreadableFile(f"JSON number {name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnreadableFile(f"JSON number {text[:40]} is out of range (it overflows to {value})")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise UnreadableFile(f"JSON integer of {digits} digits: more than the {MAX_INT_DIGITS} FADE reads")
    return int(text)


__all__ = ["UnreadableFile", "read_bytes", "read_text", "parse_json", "read_json", "MAX_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS"]
