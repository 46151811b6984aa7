"""Text from a file made safe to print on a terminal: control characters shown as escapes, never obeyed.

A results file, a snapshot or a tuning file may come from anyone (issue 30: a model name carrying ESC ] 0 ; ... BEL
retitled the window, ESC [ 2 J cleared the screen, ESC [ 8 m hid the text after it). A terminal obeys any
control character it is sent, so every string FADE prints from a file goes through `printable` first.
"""

from __future__ import annotations

# Bidirectional formatting characters: not category Cc, but they reorder what a terminal shows, so printed text
# could read differently from what it is ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = ("\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                 "\u2066", "\u2067", "\u2068", "\u2069")  # fmt: skip


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_table(keep: str) -> dict:
    controls = [chr(code) for code in (*range(0x00, 0x20), *range(0x7F, 0xA0))]  # C0, DEL, C1: all of category Cc
    return {ord(char): _escape(char) for char in [*controls, *BIDI_CONTROLS] if char not in keep}


_ESCAPES = _escape_table(keep="")
_ESCAPES_KEEPING_NEWLINES = _escape_table(keep="\n")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    r"""`text` with every control character replaced by its escaped form, safe to write to a terminal.

    Replaced: the C0 controls U+0000-U+001F (ESC, BEL, CR, TAB, backspace, ...), DEL U+007F, the C1 controls
    U+0080-U+009F (CSI U+009B starts an escape sequence on its own) and the bidirectional formatting characters
    (BIDI_CONTROLS). Each becomes the escape Python would write for it: ESC -> `\x1b`, U+202E -> `\u202e`.
    Everything else, other scripts and emoji included, is kept. A newline is escaped too, so one field prints
    on one line and cannot start a line that looks like FADE's own; `keep_newlines=True` keeps "\n" for text
    meant to span lines. Backslashes are kept as they are, so a literal `\x1b` in the text reads the same as
    an escaped ESC: the result is for reading, not for parsing back.
    """
    return text.translate(_ESCAPES_KEEPING_NEWLINES if keep_newlines else _ESCAPES)


__all__ = ["printable", "BIDI_CONTROLS"]
