"""Atomic file writes, the one writer every FADE output goes through: readers see the old file or the new one,
never half of either, and a failed write (full disk, Ctrl-C) leaves the old file as it was."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Union


def atomic_write_bytes(path: Union[str, Path], data: bytes) -> Path:
    """Write `data` to a temp file beside `path` (same filesystem), fsync it, then os.replace it into place.

    The file gets the mode a plain open() would give it: the old file's mode when it is replaced, else
    0o666 less the umask (a temp file alone would be 0o600, and a report nobody else can read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, _mode_for(path))
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Union[str, Path], text: str) -> Path:
    """atomic_write_bytes of `text` in UTF-8 (never the locale's encoding)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
