"""The argument line of ``%%run_code``: shell words that always fit on one line.

A cell magic's arguments are the cell's first line, so an argument holding a newline
cannot be written with plain shell quoting (``'a<newline>b'`` ends the line inside the
quotes and the rest of the value becomes the program). As in bash, ``$'...'`` writes
such a value on one line with escapes (``\\n``, ``\\t``, ``\\r``, ``\\\\``, ``\\'``,
``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``)::

    quote_argument("analyst\\nof sales")       # "$'analyst\\\\nof sales'"
    split_line("--scope $'analyst\\\\nof sales'")  # ['--scope', 'analyst\\nof sales']

Everything else is :mod:`shlex` (POSIX rules): what ``shlex.quote`` writes reads back.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["quote_argument", "split_line"]

_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.S)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.S)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def quote_argument(value: str) -> str:
    """``value`` as one shell word on one line: ``shlex.quote`` when every character is
    printable, else ``$'...'`` with escapes."""
    if value.isprintable():
        return shlex.quote(value)
    parts = []
    for char in value:
        if char in "\\'":
            parts.append("\\" + char)
        elif char in "\n\t\r":
            parts.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[char])
        elif char.isprintable():
            parts.append(char)
        else:  # a control, separator or format character: a line break to IPython, maybe
            code = ord(char)
            parts.append(f"\\x{code:02x}" if code < 0x100 else
                         f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "$'" + "".join(parts) + "'"


def split_line(line: str) -> list[str]:
    """The words of a magic's argument line (``$'...'`` decoded); ``ValueError`` saying
    what is wrong (``No closing quotation``) for a line that does not split."""
    rebuilt: list[str] = []
    quote: str | None = None
    at = 0
    while at < len(line):
        char = line[at]
        if quote is None and line.startswith("$'", at):
            found = _ANSI_C.match(line, at)
            if found is None:
                raise ValueError("No closing quotation")
            rebuilt.append(shlex.quote(_ESCAPE.sub(_unescape, found.group(1))))
            at = found.end()
            continue
        if char == "\\" and quote != "'":  # an escaped character, outside or in "..."
            rebuilt.append(line[at:at + 2])
            at += 2
            continue
        if quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        rebuilt.append(char)
        at += 1
    return shlex.split("".join(rebuilt))


def _unescape(found: re.Match[str]) -> str:
    escape = found.group(1)
    if escape[0] in "xuU" and len(escape) > 1:
        return chr(int(escape[1:], 16))
    return _SIMPLE.get(escape, "\\" + escape)
