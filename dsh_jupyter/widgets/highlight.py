"""Syntax highlighting with Pygments when it is installed and knows the language;
escaped plain text otherwise. Output is one HTML fragment per input line."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from .text import clean, escape_html

_log = logging.getLogger(__name__)


def _pygments(module: str) -> Any:
    # Imported by name: Pygments ships no type information.
    try:
        return importlib.import_module(f"pygments{module}")
    except ImportError:  # Pygments comes with IPython, but degrade if it is missing
        return None


def _lexer(lang: str) -> Any:
    lexers, util = _pygments(".lexers"), _pygments(".util")
    if lexers is None or util is None:
        return None
    try:
        return lexers.get_lexer_by_name(lang, stripnl=False, ensurenl=True)
    except util.ClassNotFound:
        return None


def highlight_lines(lines: list[str], lang: str | None) -> list[str]:
    """HTML for each of ``lines``; spans never cross a line, so callers may number them."""
    lines = [clean(line).replace("\n", " ") for line in lines]
    plain = [escape_html(line) for line in lines]
    lexer = _lexer(lang) if lang else None
    if lexer is None or not lines:
        return plain
    formatter = _pygments(".formatters").HtmlFormatter(nowrap=True, noclasses=True)
    try:
        # Pygments escapes the text itself and closes its spans at every newline.
        html = _pygments("").highlight("\n".join(lines), lexer, formatter)
    except Exception:  # a lexer bug must not lose the output
        _log.debug("highlighting %s failed", lang, exc_info=True)
        return plain
    out = html.split("\n")
    if out and out[-1] == "" and len(out) == len(lines) + 1:
        out.pop()
    return out if len(out) == len(lines) else plain


def can_highlight(lang: str | None) -> bool:
    return bool(lang) and _lexer(lang or "") is not None
