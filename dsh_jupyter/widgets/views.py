"""Render intents to document blocks: one function per call view and result view,
plus the generic fallbacks for tools without presenters and for errors."""

from __future__ import annotations

import difflib

from .._images import check_image
from ..registry.presentation import (
    CallView,
    DiffCallView,
    DiffResultView,
    DurableResult,
    FileDiff,
    GenericResultView,
    Location,
    ReadResultView,
    ResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    WebResultView,
)
from ..registry.results import content_text
from .displays import image_label
from .doc import Block, Code, Field, Image, Items, Link, Links, Section, Text
from .text import plural

# --- call views ---------------------------------------------------------------------


def call_blocks(view: CallView) -> tuple[Block, ...]:
    """The body of a call card (its title is ``view.title``)."""
    if isinstance(view, TerminalCallView):
        blocks: list[Block] = [Code(text=f"$ {view.title}", lang="shell")]
        if view.description:
            blocks.append(Text(text=view.description, tone="muted"))
        if view.cwd:
            blocks.append(Field(label="cwd", value=view.cwd))
        return tuple(blocks)
    if isinstance(view, DiffCallView):
        return (*_diff_sections(view.diffs), *_locations(view.locations))
    blocks = []
    if view.raw_input:
        blocks.append(Code(text=view.raw_input, label="input"))
    if view.content:
        blocks.append(Code(text=view.content))
    return (*blocks, *_locations(view.locations))


def _locations(locations: tuple[Location, ...]) -> tuple[Block, ...]:
    if not locations:
        return ()
    return (Items(items=tuple(loc.path if loc.line is None else f"{loc.path}:{loc.line}"
                              for loc in locations)),)


def _diff_sections(diffs: tuple[FileDiff, ...]) -> list[Block]:
    return [Section(title=f"{diff.path} (new file)" if diff.old_text is None else diff.path,
                    blocks=(Code(text=unified_diff(diff), lang="diff"),)) for diff in diffs]


def unified_diff(diff: FileDiff) -> str:
    old = [] if diff.old_text is None else diff.old_text.splitlines()
    lines = difflib.unified_diff(old, diff.new_text.splitlines(),
                                 "/dev/null" if diff.old_text is None else f"a/{diff.path}",
                                 f"b/{diff.path}", lineterm="")
    return "\n".join(lines) or "(no changes)"


# --- result views -------------------------------------------------------------------


def result_blocks(view: ResultView) -> tuple[Block, ...]:
    """The result part of a card for a presenter's view."""
    body = _result_body(view)
    if view.title:
        return (Section(title=view.title, blocks=body),)
    return body


def _result_body(view: ResultView) -> tuple[Block, ...]:
    if isinstance(view, TerminalResultView):
        return _terminal(view)
    if isinstance(view, DiffResultView):
        return tuple(_diff_sections(view.diffs)) or (Text(text="(no changes)", tone="muted"),)
    if isinstance(view, SearchResultView):
        return _search(view)
    if isinstance(view, ReadResultView):
        return _read(view)
    if isinstance(view, WebResultView):
        return _web(view)
    if isinstance(view, GenericResultView):
        return (Code(text=view.content),) if view.content else ()
    raise TypeError(f"not a result view: {type(view).__name__}")


def _terminal(view: TerminalResultView) -> tuple[Block, ...]:
    blocks: list[Block] = []
    if view.output:
        blocks.append(Code(text=view.output))
    else:
        blocks.append(Text(text="(no output)", tone="muted"))
    if view.exit_code is not None:
        blocks.append(Field(label="exit code", value=str(view.exit_code),
                            tone="ok" if view.exit_code == 0 else "error"))
    if view.signal:
        blocks.append(Field(label="signal", value=view.signal, tone="error"))
    return tuple(blocks)


def search_summary(view: SearchResultView) -> str:
    """``showing N of TOTAL ...`` whenever the result was capped."""
    word, words = ("path", "paths") if view.shape == "paths" else ("match", "matches")
    if view.truncated:
        return f"showing {view.shown} of {plural(view.total, word, words)}"
    if view.total == 0:
        return f"no {words}"
    return plural(view.total, word, words)


def _search(view: SearchResultView) -> tuple[Block, ...]:
    summary = Text(text=search_summary(view), tone="muted")
    if view.shape == "paths":
        return (summary, Items(items=view.paths)) if view.paths else (summary,)
    groups = tuple(
        Section(title=f"{group.path} ({plural(len(group.matches), 'match', 'matches')})",
                blocks=(Code(text="\n".join(m.text for m in group.matches),
                             numbers=tuple(m.line for m in group.matches)),))
        for group in view.files)
    return (summary, *groups)


def _read(view: ReadResultView) -> tuple[Block, ...]:
    blocks: list[Block] = [Field(label="path", value=view.path)]
    if view.lines:
        first, last = view.lines[0].number, view.lines[-1].number
        blocks.append(Text(text=f"lines {first} to {last} of {view.total_lines}", tone="muted"))
        blocks.append(Code(text="\n".join(line.text for line in view.lines), lang=view.lang,
                           numbers=tuple(line.number for line in view.lines)))
    else:
        blocks.append(Text(text=f"no lines from line {view.offset} "
                                f"(the file has {plural(view.total_lines, 'line')})",
                           tone="muted"))
    return tuple(blocks)


def _web(view: WebResultView) -> tuple[Block, ...]:
    if view.kind == "search":
        if not view.sources:
            return (Text(text="no sources", tone="muted"),)
        return (Text(text=plural(len(view.sources), "source"), tone="muted"),
                Links(links=tuple(Link(title=s.title, url=s.url, note=s.snippet)
                                  for s in view.sources)))
    fetch = view.fetch
    if fetch is None:
        return (Text(text="(no fetch summary)", tone="muted"),)
    blocks: list[Block] = [Links(links=(Link(title=fetch.title or fetch.url, url=fetch.url),))]
    if fetch.status is not None:
        blocks.append(Field(label="status", value=str(fetch.status),
                            tone="ok" if 200 <= fetch.status < 400 else "error"))
    if fetch.content_type:
        blocks.append(Field(label="type", value=fetch.content_type))
    if fetch.bytes is not None:
        blocks.append(Field(label="size", value=plural(fetch.bytes, "byte")))
    if fetch.summary:
        blocks.append(Text(text=fetch.summary))
    return tuple(blocks)


# --- fallbacks ----------------------------------------------------------------------


def generic_result_blocks(durable: DurableResult) -> tuple[Block, ...]:
    """A tool without a presenter (or a presenter that declined): its content, text as
    code and image blocks (an MCP tool's, say) drawn, in their order."""
    if not any(block["type"] == "image" for block in durable.content):
        text = content_text(durable.content)
        if not text:
            return (Text(text="(no output)", tone="muted"),)
        return (Code(text=text),)
    blocks: list[Block] = []
    run: list[str] = []
    for block in durable.content:
        if block["type"] == "text":
            run.append(block["text"])
            continue
        if run:
            blocks.append(Code(text="\n".join(run)))
            run = []
        if block["type"] == "image":
            blocks.append(_image_block(block["mime_type"], block["data"]))
    if run:
        blocks.append(Code(text="\n".join(run)))
    return tuple(blocks)


def _image_block(mime: object, data: object) -> Block:
    # Checked here again: a replayed log is as untrusted as the tool that made it.
    checked = check_image(mime, data) if isinstance(mime, str) else None
    if checked is None:
        return Text(text=f"[an image that could not be read ({str(mime)[:80]})]", tone="muted")
    return Image(mime=checked.mime, data=checked.data, text=image_label(checked))


def error_blocks(durable: DurableResult) -> tuple[Block, ...]:
    """A failure: the error code and message (the content is ``Error: <message>``)."""
    # The code is in the card's header ("error: DENIED"); the message may be a traceback.
    message = durable.error_message or content_text(durable.content) or "(no message)"
    return (Code(text=message, label="error"),)
