"""Text helpers shared by every renderer: escaping, clipping and short summaries.

Everything a tool produced (titles, paths, output, arguments, error messages)
is untrusted. It reaches HTML only through :func:`escape_html` and Markdown
only through :func:`escape_markdown` or a code fence from :func:`fence`.

All of those, :func:`clip` and :func:`shorten` start with :func:`clean`, whose
policy is the same for every card format (plain, Markdown, HTML, summaries):

- Terminal control sequences are removed whole, parameters included: CSI
  (``ESC [`` or its 8-bit form U+009B) and OSC (``ESC ]`` or U+009D, ended by
  BEL, ``ESC \\`` or U+009C). A terminal showing the text/plain fallback would
  obey them; leaving ``31m`` behind would only add noise.
- The remaining C0 controls, DEL and every C1 control (U+0080 to U+009F) are
  removed. Tab and newline stay; CR LF and lone CR become newlines.
- Bidirectional formatting characters are replaced by a visible marker such as
  ``⟨U+202E⟩``: the embeddings and overrides U+202A to U+202E, the isolates
  U+2066 to U+2069, and the marks U+200E, U+200F and U+061C. They are invisible
  and make text display in an order other than the one it has ("Trojan Source");
  even a lone mark can reverse a run of digits. A reviewer should see that they
  were there, so they are marked rather than silently dropped. (Right-to-left
  text itself is untouched; only these formatting characters are marked.)
"""

from __future__ import annotations

import html
import re

from ..json_dump import dump_json
from ..json_value import JsonValue, NotJsonError

MAX_LINES = 400
MAX_CHARS = 40_000
SUMMARY_CHARS = 80

# Matched whole (ECMA-48 CSI: parameters 0x30-0x3F, intermediates 0x20-0x2F, a final
# byte; OSC: text up to its terminator) so no parameters are left behind, in the ESC
# form and the 8-bit C1 form alike: some terminals obey both. Two patterns, because
# one starting with a literal ESC is searched many times faster than an alternation.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)")
_ANSI_8BIT = re.compile(r"\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BIDI_MARKERS = tuple((char, f"⟨U+{ord(char):04X}⟩")
                      for char in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
                                  "\u200e\u200f\u061c")
# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that
# start or end Markdown (or JupyterLab's $math$) constructs.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~=$:^\"'])")
_LANG = re.compile(r"[^A-Za-z0-9_+.#-]")


def clean(text: str) -> str:
    """Terminal escapes and control characters removed, bidi controls marked, newlines
    normalised (the policy is in the module docstring): U+009B ``31m`` + ``red`` +
    U+202E + ``evil`` becomes ``red⟨U+202E⟩evil``."""
    text = _ANSI.sub("", text)
    if "\x9b" in text or "\x9d" in text:  # a substring test is far cheaper than a regex
        text = _ANSI_8BIT.sub("", text)
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if not text.isascii():  # O(1) in CPython, and most output is ASCII
        # Twelve substring searches run in C, much faster than a regex with a callback.
        for char, marker in _BIDI_MARKERS:
            if char in text:
                text = text.replace(char, marker)
    return text


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
