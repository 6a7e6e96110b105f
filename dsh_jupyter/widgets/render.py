"""Documents to text/plain, text/markdown and HTML.

text/plain and text/markdown are deterministic (no durations, ids or times) so
nbval can compare them; HTML shows durations only when ``timing=True`` (the
live widget). Every tool-derived string is escaped here and nowhere else.

A program's displays are the exception to "escaped": an :class:`Image` becomes an
``<img>`` whose ``src`` is a ``data:`` URI (its type one of the image types, its data
nothing but base64, both checked here again), and :class:`SandboxedHtml` becomes an
``<iframe sandbox="" srcdoc="...">``: the program's HTML, escaped into the attribute,
is parsed as a document of its own that may run no script, has an opaque origin (no
cookies, no Jupyter token, no access to the page) and, by its Content-Security-Policy,
fetches nothing but ``data:`` images. Text formats show their ``text``, never base64.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, urlsplit

from .._images import IMAGE_TYPES
from .doc import (
    Block,
    Code,
    Doc,
    Field,
    File,
    Fold,
    Image,
    Items,
    Link,
    Links,
    SandboxedHtml,
    Text,
    Tone,
)
from .highlight import highlight_lines
from .text import clean, clip, escape_html, escape_markdown, fence

STATUS_COLORS = {
    "queued": "#8c959f", "running": "#0969da", "ok": "#1a7f37", "error": "#cf222e",
    "stopped": "#6e7781", "waiting": "#9a6700",
    "approved": "#1a7f37", "rejected": "#cf222e", "cancelled": "#6e7781",
}
TONE_COLORS: dict[Tone, str | None] = {
    "plain": None, "muted": "#6e7781", "ok": "#1a7f37", "error": "#cf222e"}
CARD_STYLE = ("border:1px solid #d0d7de;border-radius:6px;padding:6px 10px;margin:4px 0;"
              "font-size:13px;line-height:1.45")
NESTED_STYLE = "border-left:3px solid #d0d7de;padding:2px 0 2px 8px;margin:4px 0"
PRE_STYLE = ("margin:4px 0;padding:4px 6px;background:rgba(127,127,127,0.08);overflow:auto;"
             "max-height:32em;font-size:12px;line-height:1.4;white-space:pre")
NUMBER_STYLE = "color:#8c959f;user-select:none"
IMAGE_STYLE = "display:block;max-width:100%;height:auto;margin:4px 0"
FRAME_STYLE = ("display:block;width:100%;margin:4px 0;border:1px solid #d0d7de;"
               "border-radius:4px;background:#fff;resize:vertical")
FRAME_HEIGHTS = (40, 600)
"""The least and most pixels a sandboxed frame is drawn at (it scrolls inside)."""
FRAME_POLICY = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
                "img-src data:; style-src 'unsafe-inline'; font-src data:\">")
"""First in every frame's document: nothing is fetched from the network, so displayed
HTML cannot send what the program saw anywhere (the kernel itself may have no network)."""
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def status_label(doc: Doc) -> str | None:
    if doc.status is None:
        return None
    return f"{doc.status}: {doc.status_detail}" if doc.status_detail else doc.status


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _code_lines(code: Code) -> tuple[list[str], list[str] | None, int]:
    text, omitted = clip(code.text)
    lines = text.split("\n")
    if code.numbers is None:
        return lines, None, omitted
    numbers = [str(n) for n in code.numbers[: len(lines)]]
    numbers += [""] * (len(lines) - len(numbers))
    width = max(len(n) for n in numbers)
    return lines, [n.rjust(width) for n in numbers], omitted


def _more(omitted: int) -> str:
    return f"… {omitted} more line{'s' if omitted != 1 else ''} not shown"


# --- text/plain ---------------------------------------------------------------------


def to_plain(doc: Doc) -> str:
    return "\n".join(_plain_doc(doc, ""))


def _plain_doc(doc: Doc, pad: str) -> list[str]:
    label = status_label(doc)
    head = f"[{clean(label)}] {clean(doc.title)}" if label else clean(doc.title)
    if doc.subtitle:
        head += f" — {clean(doc.subtitle)}"
    return [pad + head, *_plain_blocks(doc.blocks, pad + "  ")]


def _plain_blocks(blocks: Iterable[Block], pad: str) -> list[str]:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Doc):
            out += _plain_doc(block, pad)
        elif isinstance(block, Text):
            out += [pad + line for line in clean(block.text).split("\n")]
        elif isinstance(block, Field):
            out.append(f"{pad}{clean(block.label)}: {clean(block.value)}")
        elif isinstance(block, Code):
            lines, numbers, omitted = _code_lines(block)
            if block.label:
                out.append(f"{pad}{clean(block.label)}:")
            inner = pad + "  "
            if numbers is None:
                out += [inner + line for line in lines]
            else:
                out += [f"{inner}{n} | {line}" for n, line in zip(numbers, lines, strict=True)]
            if omitted:
                out.append(inner + _more(omitted))
        elif isinstance(block, Items):
            out += [f"{pad}- {clean(item)}" for item in block.items]
        elif isinstance(block, Image):
            out.append(pad + " ".join(clean(block.text).split()))
        elif isinstance(block, SandboxedHtml):
            lines, omitted = _display_text(block.text)
            out += [pad + line for line in lines]
            if omitted:
                out.append(pad + _more(omitted))
        elif isinstance(block, File):
            out.append(f"{pad}- {clean(block.name)} ({clean(block.note)})")
        elif isinstance(block, Fold):
            out.append(pad + clean(block.summary))
        elif isinstance(block, Links):
            for link in block.links:
                out.append(f"{pad}- {clean(link.title)} <{clean(link.url)}>")
                if link.note:
                    out += [f"{pad}  {line}" for line in clean(link.note).split("\n")]
        else:
            out.append(f"{pad}{clean(block.title)}:")
            out += _plain_blocks(block.blocks, pad + "  ")
    return out


# --- text/markdown ------------------------------------------------------------------


def to_markdown(doc: Doc) -> str:
    return "\n\n".join(_markdown_doc(doc))


def _markdown_doc(doc: Doc) -> list[str]:
    head = f"**{escape_markdown(doc.title)}**"
    label = status_label(doc)
    if label:
        head += f" · *{escape_markdown(label)}*"
    if doc.subtitle:
        head += f" — {escape_markdown(doc.subtitle)}"
    return [head, *_markdown_blocks(doc.blocks)]


def _markdown_blocks(blocks: Iterable[Block]) -> list[str]:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Doc):
            nested = "\n\n".join(_markdown_doc(block))
            out.append("\n".join(f"> {line}" if line else ">" for line in nested.split("\n")))
        elif isinstance(block, Text):
            text = escape_markdown(block.text)
            out.append(f"*{text}*" if block.tone == "muted" else text)
        elif isinstance(block, Field):
            out.append(f"{escape_markdown(block.label)}: {escape_markdown(block.value)}")
        elif isinstance(block, Code):
            lines, numbers, omitted = _code_lines(block)
            if numbers is not None:
                lines = [f"{n} | {line}" for n, line in zip(numbers, lines, strict=True)]
            if omitted:
                lines.append(_more(omitted))
            label = f"*{escape_markdown(block.label)}*\n\n" if block.label else ""
            lang = block.lang if numbers is None else None
            out.append(label + fence("\n".join(lines), lang))
        elif isinstance(block, Items):
            out.append("\n".join(f"- {escape_markdown(item)}" for item in block.items))
        elif isinstance(block, Image):
            out.append(f"*{escape_markdown(' '.join(block.text.split()))}*")
        elif isinstance(block, SandboxedHtml):
            lines, omitted = _display_text(block.text)
            if omitted:
                lines.append(_more(omitted))
            out.append(fence("\n".join(lines)))
        elif isinstance(block, File):
            out.append(f"- {escape_markdown(block.name)} ({escape_markdown(block.note)})")
        elif isinstance(block, Fold):
            out.append(f"*{escape_markdown(block.summary)}*")
        elif isinstance(block, Links):
            out.append("\n".join(_markdown_link(link) for link in block.links))
        else:
            out.append(f"*{escape_markdown(block.title)}*")
            out += _markdown_blocks(block.blocks)
    return out


def _safe_url(url: str) -> str | None:
    """``url`` if it is an http(s) URL, percent-quoted so it cannot break out of markup."""
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return None
    if scheme not in ("http", "https"):
        return None
    return quote(url.strip(), safe=":/?#@!&+,;=%~-._")


def _markdown_link(link: Link) -> str:
    url = _safe_url(link.url)
    title = escape_markdown(link.title)
    line = f"- [{title}]({url})" if url else f"- {title} ({escape_markdown(link.url)})"
    if link.note:
        line += "  \n  " + escape_markdown(link.note).replace("\n", "\n  ")
    return line


# --- HTML ---------------------------------------------------------------------------


def to_html(doc: Doc, *, timing: bool = False) -> str:
    """The whole card framed as one ``div``."""
    return (f'<div class="dsh-card dsh-{escape_html(doc.kind)}" style="{CARD_STYLE}">'
            f"{html_header(doc, timing=timing)}{html_blocks(doc.blocks, timing=timing)}</div>")


def html_header(doc: Doc, *, timing: bool = False) -> str:
    parts = []
    label = status_label(doc)
    if label is not None and doc.status is not None:
        color = STATUS_COLORS[doc.status]
        parts.append(f'<span class="dsh-status dsh-status-{doc.status}" style="color:#fff;'
                     f'background:{color};border-radius:8px;padding:0 6px;font-size:11px">'
                     f"{escape_html(label)}</span>")
    parts.append(f'<b class="dsh-title">{escape_html(doc.title)}</b>')
    if doc.subtitle:
        parts.append(f'<span class="dsh-subtitle" style="color:#6e7781">'
                     f"{escape_html(doc.subtitle)}</span>")
    if timing and doc.duration is not None:
        parts.append(f'<span class="dsh-duration" style="color:#6e7781;font-size:11px">'
                     f"{format_duration(doc.duration)}</span>")
    if timing and doc.waited:
        parts.append(f'<span class="dsh-waited" style="color:#6e7781;font-size:11px">'
                     f"(waited {format_duration(doc.waited)})</span>")
    if timing and doc.trace is not None and doc.kind == "sub-call":
        # Same trace as its run's card: the span id alone, the trace id on hover.
        trace_id, span_id = (escape_html(part) for part in doc.trace)
        parts.append(f'<span class="dsh-trace" style="color:#6e7781;font-size:11px" '
                     f'title="OpenTelemetry span id (trace {trace_id})">span <code '
                     f'style="user-select:all">{span_id}</code></span>')
    elif timing and doc.trace is not None:
        trace_id, span_id = (escape_html(part) for part in doc.trace)
        parts.append(f'<span class="dsh-trace" style="color:#6e7781;font-size:11px" '
                     f'title="OpenTelemetry trace id, span id">trace <code style="user-select:'
                     f'all">{trace_id}</code> span <code style="user-select:all">{span_id}'
                     "</code></span>")
    return f'<div class="dsh-header">{" ".join(parts)}</div>'


def html_blocks(blocks: Iterable[Block], *, timing: bool = False) -> str:
    return "".join(_html_block(block, timing) for block in blocks)


def _tone(tone: Tone) -> str:
    color = TONE_COLORS[tone]
    return f' style="color:{color}"' if color else ""


def _html_block(block: Block, timing: bool) -> str:
    if isinstance(block, Doc):
        return (f'<div class="dsh-nested dsh-{escape_html(block.kind)}" style="{NESTED_STYLE}">'
                f"{html_header(block, timing=timing)}{html_blocks(block.blocks, timing=timing)}"
                "</div>")
    if isinstance(block, Text):
        body = "<br>".join(escape_html(line) for line in clean(block.text).split("\n"))
        return f'<div class="dsh-text"{_tone(block.tone)}>{body}</div>'
    if isinstance(block, Field):
        return (f'<div class="dsh-field"><span style="color:#6e7781">{escape_html(block.label)}:'
                f"</span> <span{_tone(block.tone)}>{escape_html(block.value)}</span></div>")
    if isinstance(block, Code):
        return _html_code(block)
    if isinstance(block, Items):
        items = "".join(f"<li>{escape_html(item)}</li>" for item in block.items)
        return f'<ul class="dsh-items" style="margin:2px 0;padding-left:20px">{items}</ul>'
    if isinstance(block, Links):
        items = "".join(f"<li>{_html_link(link)}</li>" for link in block.links)
        return f'<ul class="dsh-links" style="margin:2px 0;padding-left:20px">{items}</ul>'
    if isinstance(block, File):
        return _html_file(block)
    if isinstance(block, Image):
        return _html_image(block)
    if isinstance(block, SandboxedHtml):
        return _html_frame(block)
    if isinstance(block, Fold):
        return (f'<details class="dsh-fold"><summary style="cursor:pointer;color:#6e7781">'
                f"{escape_html(block.summary)}</summary>{html_blocks(block.blocks, timing=timing)}"
                "</details>")
    return (f'<div class="dsh-section"><div style="font-weight:600;margin-top:4px">'
            f"{escape_html(block.title)}</div>{html_blocks(block.blocks, timing=timing)}</div>")


def _html_code(code: Code) -> str:
    lines, numbers, omitted = _code_lines(code)
    rendered = highlight_lines(lines, code.lang)
    if numbers is not None:
        rendered = [f'<span class="dsh-ln" style="{NUMBER_STYLE}">{escape_html(n)} </span>{line}'
                    for n, line in zip(numbers, rendered, strict=True)]
    if omitted:
        rendered.append(f'<span style="color:#6e7781">{escape_html(_more(omitted))}</span>')
    body = "\n".join(rendered)
    pre = f'<pre class="dsh-code" style="{PRE_STYLE}">{body}</pre>'
    label = escape_html(code.label) if code.label else None
    if code.collapsible:
        summary = label or "details"
        return (f'<details class="dsh-details"{" open" if code.open else ""}>'
                f'<summary style="cursor:pointer">{summary}</summary>{pre}</details>')
    if label:
        return f'<div class="dsh-label" style="color:#6e7781">{label}</div>{pre}'
    return pre


def _html_link(link: Link) -> str:
    title = escape_html(link.title)
    url = _safe_url(link.url)
    if url is not None:
        head = (f'<a href="{escape_html(url)}" target="_blank" rel="noopener noreferrer">'
                f"{title}</a>")
    else:
        head = title
    out = f'{head} <span style="color:#6e7781">{escape_html(link.url)}</span>'
    if link.note:
        out += f'<div>{escape_html(link.note)}</div>'
    return out


def _display_text(text: str) -> tuple[list[str], int]:
    """A display's text/plain as lines, clipped like code."""
    clipped, omitted = clip(text)
    return clipped.split("\n"), omitted


def _html_image(image: Image) -> str:
    alt = escape_html(" ".join(image.text.split()))
    if image.mime not in IMAGE_TYPES or _BASE64.fullmatch(image.data) is None:
        return f'<div class="dsh-text" style="color:#6e7781">{alt}</div>'
    size = "".join(f";{name}:{value}px" for name, value in
                   (("width", image.width), ("height", image.height))
                   if isinstance(value, int) and not isinstance(value, bool) and value > 0)
    return (f'<img class="dsh-image" src="data:{image.mime};base64,{image.data}" alt="{alt}" '
            f'title="{alt}" style="{IMAGE_STYLE}{size}">')


def _html_file(file: File) -> str:
    """The file's name, a download link when the card holds its bytes. The link's type is
    always octet-stream, whatever the program claimed: the browser saves it, never shows
    it (an HTML or SVG file opened from a card would run in the notebook's origin)."""
    name = escape_html(file.name)
    if file.data is not None and _BASE64.fullmatch(file.data) is not None:
        name = (f'<a class="dsh-file" download="{name}" '
                f'href="data:application/octet-stream;base64,{file.data}">{name}</a>')
    return (f'<div class="dsh-file-row">{name} '
            f'<span style="color:#6e7781">({escape_html(file.note)})</span></div>')


def _html_frame(frame: SandboxedHtml) -> str:
    least, most = FRAME_HEIGHTS
    height = frame.height if isinstance(frame.height, int) else least
    height = max(least, min(most, height))
    title = escape_html(" ".join(frame.text.split())[:120] or "HTML output of the program")
    return (f'<iframe class="dsh-html" sandbox="" referrerpolicy="no-referrer" '
            f'title="{title}" srcdoc="{escape_html(FRAME_POLICY + frame.html)}" '
            f'style="{FRAME_STYLE};height:{height}px"></iframe>')
