"""Names and text that leave a run: valid UTF-8, with control characters escaped.

What a program names, prints and returns comes from a hostile kernel and goes to a model,
to MCP clients (whose JSON must be UTF-8: one lone surrogate and the reply cannot be
sent), to terminals and to cards. A file name that is not UTF-8 reaches the host as a
``surrogateescape`` string (each bad byte a code point U+DC80..U+DCFF); an ESC starts a
terminal escape; U+202E turns the rest of a line around. So every such character is
written as a visible escape, in Python's syntax with lower-case hex:

==================================================  ==========================================
character                                           written as
==================================================  ==========================================
a byte that is not UTF-8 (U+DC80..U+DCFF)           ``\\xHH``, HH the byte (``80`` to ``ff``)
C0 controls and DEL (U+0000..U+001F, U+007F)        ``\\xHH`` (``00`` to ``1f``, ``7f``); ``\\n``,
                                                    ``\\t``, ``\\r`` for those three
C1 controls (U+0080..U+009F)                        ``\\u0080`` .. ``\\u009f``
bidi controls: U+061C, U+200E, U+200F,              ``\\uXXXX``
U+202A..U+202E, U+2066..U+2069; and U+2028,
U+2029, which end a line where they are read
any other lone surrogate                            ``\\uXXXX`` (``\\ud800``)
==================================================  ==========================================

Two rules use that table:

- :func:`escape_name` (file names): everything above, and a backslash is written ``\\\\``.
  So the escaped name is unambiguous: no two names give the same text, and the text says
  which bytes the name has (``\\xHH`` below ``80`` is that character, from ``80`` a raw
  byte; ``\\uXXXX`` a code point).
- :func:`escape_text` (what a program prints or returns, failure messages, displays):
  newlines and tabs are kept, since they are the text's structure, and so are
  backslashes (a printed Windows path stays readable; text need not be unambiguous, only
  inert). A carriage return before a newline is dropped (``\\r\\n`` ends a line); any
  other is written ``\\r``, so a progress bar's updates read as ``10%\\r20%`` and no
  terminal is made to write over a line.

Where they are applied, once each, where that kind of text becomes part of a run's
result: log lines in :class:`~dsh_jupyter.kernel.run.logs.OutputLog` and displays in
:class:`~dsh_jupyter.kernel.run.displays.DisplayLog` as they are kept (so what is charged to
the output budget and shown live is what the result holds), and the returned value, the
failure message and the file names in :func:`safe_result`, as a runtime hands its result
out (``KernelRuntime.run``, ``InProcessRuntime.run``). The value is charged to the output
budget as the program returned it: escaping can make it longer, at most 3.5 times for a
string of nothing but C1 controls (2 bytes of JSON each, then 7).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from typing import Any, Final, cast

from .json_value import FrozenDict, FrozenList, JsonValue, breathe
from .runtime import CodeRunResult, RunFile

__all__ = ["escape_json", "escape_name", "escape_text", "raw_name", "safe_file", "safe_result"]

_BIDI_AND_SURROGATES: Final = ("\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                                "\ud800-\udfff")
_NAME: Final = re.compile(f"[\\\\\x00-\x1f\x7f-\x9f{_BIDI_AND_SURROGATES}]")
_TEXT: Final = re.compile(f"\r\n?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI_AND_SURROGATES}]")
_ASCII_TEXT: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
"""What :data:`_TEXT` finds in ASCII text (``\\r`` included), with a simpler, faster set."""
_SHORT: Final = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_WALK_CHUNK: Final = 20_000
"""Nodes of a value walked between two chances for the event loop to take the GIL."""
_SCALARS: Final = frozenset((int, float, bool, type(None)))


def _escape(char: str) -> str:
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def _escape_match(match: re.Match[str]) -> str:
    return _escape(match.group())


def _escape_text_match(match: re.Match[str]) -> str:
    found = match.group()
    return "\n" if found == "\r\n" else _escape(found)


def escape_name(name: str) -> str:
    """``name`` (a ``surrogateescape`` string, as ``os.listdir`` gives) with every byte
    that is not UTF-8, every control and bidi character, and every backslash escaped:
    ``"a\\udcff\\x1b.txt"`` becomes ``a\\xff\\x1b.txt`` (see the module docstring)."""
    if (name.isprintable() and "\\" not in name) or _NAME.search(name) is None:
        return name
    return _NAME.sub(_escape_match, name)


def escape_text(text: str) -> str:
    """``text`` with control and bidi characters and lone surrogates escaped, newlines and
    tabs kept, ``\\r\\n`` made ``\\n`` (see the module docstring)."""
    if _is_clean(text):
        return text
    return _TEXT.sub(_escape_text_match, text)


def _is_clean(text: str) -> bool:
    """Whether :func:`escape_text` would leave ``text`` as it is. ``isprintable`` is the
    fast test (a C loop, several times faster than the pattern): it is false for every
    character escaped here (controls, format characters such as the bidi ones, surrogates,
    line and paragraph separators), and for tabs and newlines, which the pattern keeps."""
    if text.isprintable():
        return True
    return (_ASCII_TEXT if text.isascii() else _TEXT).search(text) is None


def escape_json(value: JsonValue) -> JsonValue:
    """``value`` with :func:`escape_text` applied to every string in it, object keys
    included; containers that change are rebuilt as the same (frozen) type, the rest is
    shared, and a value that needs nothing is returned as it is. When escaping makes two
    keys of one object equal, that object's keys are escaped as names (unambiguous)
    instead. Walks with an explicit stack (any depth), letting the event loop take the
    GIL every so often: call it in a worker thread for a large value."""
    if type(value) is str:
        return escape_text(value)
    if not isinstance(value, list | dict) or _only_scalars(value):
        return value
    # Each frame: the container, its remaining (key, child) pairs, its changed children,
    # and where it sits in its parent.
    stack: list[tuple[Any, Iterator[tuple[Any, Any]], dict[Any, Any], Any]] = [
        (value, _children(value), {}, None)]
    walked = 0
    result: Any = value
    while stack:
        container, children, changed, place = stack[-1]
        for key, child in children:
            walked += 1
            if walked % _WALK_CHUNK == 0:
                breathe()
            if type(child) is str:
                if not _is_clean(child):
                    changed[key] = escape_text(child)
            elif isinstance(child, list | dict) and not _only_scalars(child):
                stack.append((child, _children(child), {}, key))
                break
        else:
            stack.pop()
            built = _rebuilt(container, changed)
            if not stack:
                result = built
            elif built is not container:
                stack[-1][2][place] = built
    return cast(JsonValue, result)


def _children(container: list[Any] | dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def _only_scalars(container: list[Any] | dict[str, Any]) -> bool:
    """A list of numbers, booleans and nulls (a column of a table): nothing to escape,
    found by C code, a chunk at a time."""
    if not isinstance(container, list) or len(container) <= 16:
        return False
    for start in range(0, len(container), _WALK_CHUNK):
        if not set(map(type, container[start:start + _WALK_CHUNK])) <= _SCALARS:
            return False
        breathe()
    return True


def _rebuilt(container: Any, changed: dict[Any, Any]) -> Any:
    if isinstance(container, list):
        if not changed:
            return container
        items = list(container)
        for index, child in changed.items():
            items[index] = child
        return FrozenList(items) if type(container) is FrozenList else items
    keys_clean = all(map(_is_clean, container))
    if keys_clean and not changed:
        return container
    members = {key: changed.get(key, child) for key, child in container.items()}
    if not keys_clean:
        escaped = {escape_text(key): child for key, child in members.items()}
        if len(escaped) < len(members):  # two keys became one: keep them apart
            escaped = {escape_name(key): child for key, child in members.items()}
        members = escaped
    return FrozenDict(members) if type(container) is FrozenDict else members


def raw_name(name: str) -> bytes:
    """The bytes of a ``surrogateescape`` file name as the file system holds them."""
    try:
        return os.fsencode(name)
    except UnicodeEncodeError:  # a surrogate that no byte gave (a remote kernel's name)
        return name.encode("utf-8", "surrogatepass")


def safe_file(file: RunFile) -> RunFile:
    """``file`` named with :func:`escape_name`, its ``raw_name`` the bytes of the name it
    had; a file that has its ``raw_name`` already is returned as it is."""
    if file.raw_name is not None:
        return file
    return dataclasses.replace(file, name=escape_name(file.name), raw_name=raw_name(file.name))


def safe_result(result: CodeRunResult) -> CodeRunResult:
    """``result`` as a runtime hands it out: its value and failure message escaped as
    text, its files named with :func:`escape_name` (each keeping its ``raw_name``). Its
    logs and displays were escaped as they were kept (see the module docstring). Walks the
    value: call it in a worker thread when the value is large."""
    changes: dict[str, Any] = {}
    value = escape_json(result.value)
    if value is not result.value:
        changes["value"] = value
    failure = result.failure
    if failure is not None and not _is_clean(failure.message):
        changes["failure"] = dataclasses.replace(failure, message=escape_text(failure.message))
    if result.files:
        files = tuple(safe_file(file) for file in result.files)
        if any(new is not old for new, old in zip(files, result.files, strict=True)):
            changes["files"] = files
    return dataclasses.replace(result, **changes) if changes else result

