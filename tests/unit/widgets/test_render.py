"""Documents to text/plain, text/markdown and HTML: escaping, clipping, highlighting."""

from __future__ import annotations

import re
import sys

import pytest

from dsh_jupyter.widgets.doc import Code, Doc, Field, Items, Link, Links, Section, Text
from dsh_jupyter.widgets.highlight import can_highlight, highlight_lines
from dsh_jupyter.widgets.render import to_html, to_markdown, to_plain
from dsh_jupyter.widgets.text import (
    MAX_LINES,
    clean,
    clip,
    escape_html,
    escape_markdown,
    fence,
    shorten,
    summarize_arguments,
)

PAYLOAD = "<img src=x onerror=alert(1)>"


def every_block(text: str) -> Doc:
    """A document with ``text`` in every string a tool can reach."""
    return Doc(title=text, kind="tool", status="error", status_detail=text, subtitle=text,
               duration=1.5, blocks=(
                   Text(text=text), Field(label="path", value=text),
                   Code(text=text, lang="python", label=text),
                   Code(text=text, numbers=(7,), collapsible=True),
                   Items(items=(text,)), Links(links=(Link(title=text, url=text, note=text),)),
                   Section(title=text, blocks=(Text(text=text),)),
                   Doc(title=text, kind="sub-call", subtitle=text, blocks=(Text(text=text),))))


def test_html_escapes_every_tool_string() -> None:
    html = to_html(every_block(PAYLOAD), timing=True)
    assert "<img" not in html and "onerror=alert(1)&gt;" in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 12


def test_markdown_escapes_every_tool_string() -> None:
    markdown = to_markdown(every_block(PAYLOAD))
    outside_fences = "".join(part for i, part in enumerate(markdown.split("```")) if i % 2 == 0)
    assert "<img" not in outside_fences
    assert "&lt;img src\\=x onerror\\=alert\\(1\\)&gt;" in markdown
    # Inside a code fence the text is literal, which Markdown renders as text.
    assert f"```python\n{PAYLOAD}\n```" in markdown


def test_plain_text_is_the_text_itself() -> None:
    plain = to_plain(every_block(PAYLOAD))
    assert plain.splitlines()[0] == f"[error: {PAYLOAD}] {PAYLOAD} — {PAYLOAD}"
    assert "\n    7 | <img" in plain


def test_fallbacks_never_show_durations() -> None:
    doc = Doc(title="t", kind="tool", status="ok", duration=1.25)
    assert "1.2" not in to_plain(doc) + to_markdown(doc) + to_html(doc)
    assert "1.2 s" in to_html(doc, timing=True)


@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,<script>",
                                 " JavaScript:alert(1)", "vbscript:x", "//evil.example"])
def test_only_http_urls_become_links(url: str) -> None:
    doc = Doc(title="t", kind="tool", blocks=(Links(links=(Link(title="x", url=url),)),))
    assert "href" not in to_html(doc)
    assert "](" not in to_markdown(doc)


def test_http_links_are_quoted() -> None:
    doc = Doc(title="t", kind="tool", blocks=(
        Links(links=(Link(title="a", url='https://e.example/a b"c)<'),)),))
    assert 'href="https://e.example/a%20b%22c%29%3C"' in to_html(doc)
    assert "[a](https://e.example/a%20b%22c%29%3C)" in to_markdown(doc)


def test_markdown_escaping_neutralises_markup() -> None:
    assert escape_markdown("**bold** [x](javascript:y) $x$ `c` # h") == (
        "\\*\\*bold\\*\\* \\[x\\]\\(javascript\\:y\\) \\$x\\$ \\`c\\` \\# h")
    assert escape_markdown("a\nb") == "a  \nb"
    assert escape_html('"&\'') == "&quot;&amp;&#x27;"


def test_fence_is_longer_than_any_backtick_run() -> None:
    assert fence("a ```` b", "py thon<") == "`````python\na ```` b\n`````"


def test_terminal_escapes_and_controls_are_removed() -> None:
    doc = Doc(title="t", kind="tool", blocks=(Code(text="\x1b[31mred\x1b[0m\r\nnext\x07"),))
    assert to_plain(doc).splitlines()[1:] == ["    red", "    next"]


def test_long_output_is_clipped_with_a_note() -> None:
    text = "\n".join(f"line {i}" for i in range(MAX_LINES + 50))
    shown, omitted = clip(text)
    assert omitted == 50 and shown.count("\n") == MAX_LINES - 1
    assert "… 50 more lines not shown" in to_plain(Doc(title="t", kind="tool",
                                                         blocks=(Code(text=text),)))
    shown, omitted = clip("x" * 100, max_chars=10)
    assert shown == "x" * 10 + "…" and omitted == 0


def test_line_numbers_keep_the_files_numbering() -> None:
    doc = Doc(title="t", kind="tool", blocks=(Code(text="a\nb", numbers=(9, 10)),))
    assert to_plain(doc).splitlines()[1:] == ["     9 | a", "    10 | b"]
    assert "<span class=\"dsh-ln\"" in to_html(doc)


def test_argument_summary_is_short_and_one_line() -> None:
    assert summarize_arguments({"path": "a.py", "n": 2}) == 'path="a.py", n=2'
    long = summarize_arguments({"text": "x\n" * 200})
    assert len(long) == 80 and long.endswith("…") and "\n" not in long


def test_highlighting_when_the_language_is_known() -> None:
    lines = highlight_lines(['s = """a', PAYLOAD, '"""'], "python")
    assert len(lines) == 3 and all("<img" not in line for line in lines)
    assert "<span" in lines[0] and can_highlight("python")
    assert highlight_lines(["x <y>"], "no-such-language") == ["x &lt;y&gt;"]
    assert not can_highlight(None)


def test_highlighting_degrades_without_pygments(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pygments" or m.startswith("pygments.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pygments", None)  # makes `import pygments` fail
    assert highlight_lines(["x = '<b>'"], "python") == ["x = &#x27;&lt;b&gt;&#x27;"]
    doc = Doc(title="t", kind="tool", blocks=(Code(text="x = 1", lang="python"),))
    assert "<span style" not in to_html(doc)


def test_rendered_markdown_contains_no_markup_from_tools() -> None:
    mistune = pytest.importorskip("mistune")  # nbconvert's Markdown renderer
    render = mistune.create_markdown(escape=False)  # raw HTML passes, as in a trusted cell
    html = render(to_markdown(every_block(PAYLOAD)))
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="javascript' not in html


# Invisible characters that change what a terminal or a reader sees. The marks U+200E,
# U+200F and U+061C are included: alone they can still reverse a run of digits.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
C1_CONTROLS = frozenset(chr(code) for code in range(0x80, 0xA0))
LINK_TARGET = re.compile(r'href="[^"]*"|\]\([^)]*\)')
TAG = re.compile(r"<[^>]*>")


def renderings(text: str) -> dict[str, str]:
    """Every card format, and the summaries, with ``text`` in every tool string."""
    doc = every_block(text)
    link = Doc(title="t", kind="tool", blocks=(
        Links(links=(Link(title=text, url=f"https://e.example/{text}", note=text),)),))
    return {"plain": to_plain(doc) + to_plain(link),
            "markdown": to_markdown(doc) + to_markdown(link),
            "html": to_html(doc, timing=True) + to_html(link),
            "shorten": shorten(text, 1000), "clip": clip(text)[0],
            "arguments": summarize_arguments({"path": text}, 1000),
            "highlighted": "\n".join(highlight_lines(text.split("\n"), "python"))}


def test_c1_controls_and_8bit_csi_are_removed_everywhere() -> None:
    lone = "".join(c for c in sorted(C1_CONTROLS) if c not in "\x9b\x9d")
    text = (f"pay \x9b1;31mred\x9b0m \x9b?2004h\x9b38:5:196mnow{lone}"
            f" \x9d0;spoofed title\x9c done\x9b")
    for name, out in renderings(text).items():
        assert not C1_CONTROLS & set(out), name
        # The whole sequence goes, not just its introducer: no parameters left behind
        # (a link's target keeps the text it was given, percent-encoded).
        out = LINK_TARGET.sub("", out)
        assert "1;31m" not in out and "2004h" not in out and "196m" not in out, name
        assert "spoofed" not in out, name
        assert "red" in out and "now" in out and "done" in out, name
    assert clean(text) == "pay red now  done"


@pytest.mark.parametrize("char", BIDI_CONTROLS, ids=lambda char: f"U+{ord(char):04X}")
def test_bidi_controls_are_marked_visibly_everywhere(char: str) -> None:
    marker = f"⟨U+{ord(char):04X}⟩"
    for name, out in renderings(f"invoice{char}fdp.exe").items():
        assert not set(BIDI_CONTROLS) & set(out), name
        # Markdown backslash-escapes the "+" outside code fences; it renders as "+".
        shown = out.replace(escape_markdown(marker), marker) if name == "markdown" else out
        shown = TAG.sub("", shown)  # what a browser shows: Pygments may split the marker
        assert f"invoice{marker}fdp" in shown, name
    assert to_plain(every_block(char)).count(marker) >= 12


def test_cleaning_keeps_tabs_newlines_and_right_to_left_text() -> None:
    hebrew_and_arabic = "\u05e9\u05dc\u05d5\u05dd \u0639\u0631\u0628\u064a"
    assert clean(f"a\tb\n{hebrew_and_arabic}") == f"a\tb\n{hebrew_and_arabic}"
    assert clean("\u202e" * 2) == "⟨U+202E⟩⟨U+202E⟩" == clean(clean("\u202e" * 2))


def test_rendered_markdown_shows_the_bidi_marker() -> None:
    mistune = pytest.importorskip("mistune")
    html = mistune.create_markdown(escape=False)(to_markdown(every_block("a\u202eb")))
    assert "\u202e" not in html and html.count("a⟨U+202E⟩b") >= 10
