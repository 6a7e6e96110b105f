"""Recorded strings in an exported notebook's markdown cells, shown and never run.

Everything a session log holds was written by something untrusted: a model, a tool, an
MCP server, a crafted file. ``nbconvert --to html`` keeps raw HTML in markdown as it is
(an ``<img onerror>`` runs, ``![x](http://...)`` loads), so no recorded string reaches a
markdown cell as markup. Each goes through the function for where it stands:

- :func:`text`: prose (the task, what the model wrote, messages). Every character that
  could start markup is backslash-escaped, so the text renders exactly as written:
  no HTML, image, link, heading, list, table column, emphasis or math.
- :func:`code`: a code span, fenced by a backtick run longer than any inside, on one line.
- :func:`cell` and :func:`cell_code`: the same inside a table row, on one line, where a
  ``|`` must not start a new column (a code span cannot hold one reliably there: its
  backslashes are literal, yet the table counts them, so it becomes escaped text in
  ``<code>``).
"""

from __future__ import annotations

import re

__all__ = ["cell", "cell_code", "code", "one_line", "text"]

# Anywhere in a line: HTML and entities, links and images, code, emphasis, strikethrough,
# math, table columns, and the escape character itself. ATX headings too: a closing "#"
# sequence would be cut from a heading's text.
_INLINE = re.compile(r"([\\`*\[\]<>&|~$#])")
# "_" opens or closes emphasis only at a word's edge: snake_case stays as it is.
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# At the start of a line only: lists, setext underlines, definition lists.
_LINE_START = re.compile(r"^([ \t]*)([-+=:])", re.M)
_ORDERED = re.compile(r"^([ \t]*\d+)([.)])", re.M)
_SCHEME = re.compile(r"(?<=\w)(:)(?=//)")  # a bare URL becomes a link (GFM autolinks)
_BACKTICKS = re.compile(r"`+")


def one_line(value: str) -> str:
    """``value`` with every run of whitespace (newlines too) as one space."""
    return " ".join(value.split())


def text(value: str) -> str:
    """``value`` as markdown that renders as exactly these characters (lines kept)."""
    escaped = _INLINE.sub(r"\\\1", value)
    escaped = _SCHEME.sub(r"\\\1", escaped)
    escaped = _UNDERSCORE.sub(r"\\_", escaped)
    escaped = _LINE_START.sub(r"\1\\\2", escaped)
    return _ORDERED.sub(r"\1\\\2", escaped)


def code(value: str) -> str:
    """``value`` as one code span on one line (whitespace runs become one space)."""
    value = one_line(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    # A span that starts or ends with a backtick needs a space inside its fence; one space
    # each side is then stripped by the renderer. An empty span is one space.
    pad = " " if not value or value[0] == "`" or value[-1] == "`" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def cell(value: str) -> str:
    """Prose in a table cell: :func:`text` on one line."""
    return text(one_line(value))


def cell_code(value: str) -> str:
    """Code in a table cell: a code span, or escaped text in ``<code>`` when it holds a
    ``|``."""
    value = one_line(value)
    if "|" not in value:
        return code(value)
    return f"<code>{text(value)}</code>"
