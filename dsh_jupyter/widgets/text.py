"""Text helpers shared by every renderer: escaping, clipping and short summaries.

Everything a tool produced (titles, paths, output, arguments, error messages)
is untrusted. It reaches HTML only through :func:`escape_html` and Markdown
only through :func:`escape_markdown` or a code fence from :func:`fence`.
"""

from __future__ import annotations

import html
import re

from ..json_value import JsonValue, NotJsonError, dump_json

MAX_LINES = 400
MAX_CHARS = 40_000
SUMMARY_CHARS = 80

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that
# start or end Markdown (or JupyterLab's $math$) constructs.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~=$:^\"'])")
_LANG = re.compile(r"[^A-Za-z0-9_+.#-]")


def clean(text: str) -> str:
    """Terminal escapes and control characters removed; newlines normalised."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def escape_html(text: str) -> str:
    return html.escape(clean(text), quote=True)


def escape_markdown(text: str) -> str:
    """Inline Markdown that shows ``text`` literally: HTML-significant characters become
    entities, Markdown punctuation is backslash-escaped, lines become hard breaks."""
    lines = []
    for line in clean(text).split("\n"):
        line = line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        lines.append(_MARKDOWN_SPECIAL.sub(r"\\\1", line))
    return "  \n".join(lines)


def fence(text: str, lang: str | None = None) -> str:
    """A fenced code block longer than any backtick run inside ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    info = _LANG.sub("", lang or "")
    return f"{ticks}{info}\n{text}\n{ticks}"


def clip(text: str, *, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> tuple[str, int]:
    """``text`` cut to at most ``max_lines`` lines and ``max_chars`` characters, and the
    number of lines left out, so a huge output cannot freeze the browser."""
    text = clean(text)
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    for line in lines[:max_lines]:
        if used + len(line) > max_chars:
            kept.append(line[: max(0, max_chars - used)] + "…")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept), len(lines) - len(kept)


def shorten(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    line = " ".join(clean(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def json_text(value: JsonValue, *, pretty: bool = True) -> str:
    try:
        return dump_json(value, indent=2 if pretty else None, compact_depth=5)
    except NotJsonError:
        return repr(value)


def summarize_arguments(arguments: JsonValue, limit: int = SUMMARY_CHARS) -> str:
    """``key=value`` pairs on one line (values as compact JSON), cut to ``limit``."""
    if isinstance(arguments, dict):
        text = ", ".join(f"{key}={json_text(value, pretty=False)}"
                         for key, value in arguments.items())
    else:
        text = json_text(arguments, pretty=False)
    return shorten(text, limit)


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {words or word + 's'}"
