"""How much of a ``run_code`` result the model reads: ``ToolRegistry(run_code_max_chars=...)``.

Two caps bound what a program sends back, and they protect different things:

- the runtime's transport cap (``KernelRuntimeConfig.max_output_bytes``, 64 MiB) protects
  this process: over it the run fails with ``output-limit``;
- the model cap here (:data:`DEFAULT_RUN_CODE_MAX_CHARS`, 50,000 characters) protects
  the model's context: a 10 MB print is a success, kept whole in the result's value, its
  card and the session log, but the model reads its head and tail with one note line
  between them saying what was cut and how to see more.

Characters are Unicode code points (what ``len`` counts). The cap covers the text the
result's logs and rendered value make together (a failure's message and the output it
captured, likewise); the value gets the room it needs first, and the logs keep at least a
quarter when they need it (:func:`share`). A part over its share keeps its first 60 % and
last 40 % (:func:`cut_text`), cut at a line break when one is near. Everything here is
pure: no I/O, no event loop, linear in the text at worst.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import RegistrationError

__all__ = ["DEFAULT_RUN_CODE_MAX_CHARS", "MIN_RUN_CODE_MAX_CHARS", "TextLimit",
           "check_max_chars", "cut_lines", "cut_text", "share"]

DEFAULT_RUN_CODE_MAX_CHARS = 50_000
"""The default model cap: what smolagents' executor lets a program print, about 12,500
tokens of English (fewer characters a token for code and JSON: up to ~17,000). A result
that size is a tenth of a 128k-token context."""
MIN_RUN_CODE_MAX_CHARS = 1_000
"""The smallest cap: room for a head, a tail and the note of each part that is cut."""
HEAD_SHARE = 0.6
"""What a cut part keeps of its start; the rest of its room goes to its end."""
LOGS_FLOOR = 4
"""Under a cap a long value needs, the logs still keep ``cap // LOGS_FLOOR`` characters."""
_SNAP = 10
"""A cut moves to a line break within ``room // _SNAP`` characters of where it falls."""


@dataclass(frozen=True, slots=True)
class TextLimit:
    """The cap of one registry's ``run_code`` results: ``max_chars``, and whether its
    runtime collects files under ``outputs/`` (the note then suggests writing one)."""

    max_chars: int
    outputs: bool = False


def check_max_chars(value: object) -> int | None:
    """``value`` as a ``run_code_max_chars``: ``None`` (no cap) or an int of at least
    :data:`MIN_RUN_CODE_MAX_CHARS`; anything else raises ``RegistrationError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistrationError(
            f"run_code_max_chars must be a number of characters (an int, at least "
            f"{MIN_RUN_CODE_MAX_CHARS:,}) or None for no cap, got {value!r}")
    if value <= 0:
        raise RegistrationError(
            f"run_code_max_chars={value} would leave the model nothing to read: pass None to "
            f"send run_code's whole output, or a cap of at least {MIN_RUN_CODE_MAX_CHARS:,} "
            f"characters (the default is {DEFAULT_RUN_CODE_MAX_CHARS:,})")
    if value < MIN_RUN_CODE_MAX_CHARS:
        raise RegistrationError(
            f"run_code_max_chars={value} is below {MIN_RUN_CODE_MAX_CHARS:,}: a cut output "
            f"needs room for its start, its end and the note between them (None: no cap)")
    return value


def share(first: int, second: int, between: int, max_chars: int) -> tuple[int, int]:
    """The room of two parts of ``first`` and ``second`` characters joined by ``between``
    characters, under ``max_chars`` together: each part's limit (a part within its limit
    stays whole). The first part (a run's value, a failure's error) gets what it needs,
    leaving the second (the logs) at least ``max_chars // 4`` when it needs that much; the
    second gets the rest."""
    if first + between + second <= max_chars:
        return first, second
    room = max(max_chars - between, 0)
    floor = min(second, room // LOGS_FLOOR)
    first_room = min(first, room - floor)
    return first_room, room - first_room


def note(what: str, removed: int, lines: int, limit: TextLimit) -> str:
    """The one line that stands where ``removed`` characters (of ``lines`` lines) of
    ``what`` were cut: how much, and how the model can see more."""
    where = ", or write it to a file under outputs/" if limit.outputs else ""
    return (f"[… {removed:,} characters ({lines:,} line{'' if lines == 1 else 's'}) of "
            f"{what} cut here: you see at most {limit.max_chars:,} of a run; print a slice or "
            f"a summary to see more{where} …]")


def cut_text(text: str, max_chars: int, what: str, limit: TextLimit) -> str:
    """``text`` if it has at most ``max_chars`` characters; else its head, the note, its
    tail, one line each, together at most ``max_chars`` (for any ``max_chars`` that holds
    a note, as every part's share of a valid cap does)."""
    if len(text) <= max_chars:
        return text
    head, said, tail = _cut(text, max_chars, what, limit)
    return f"{head}\n{said}\n{tail}"


def cut_lines(lines: list[str], max_chars: int, what: str, limit: TextLimit) -> list[str]:
    """``lines`` itself (log entries, joined by newlines) if they fit ``max_chars``; else
    the lines of :func:`cut_text` of their text: the head's lines, the note, the tail's."""
    if _joined_length(lines) <= max_chars:
        return lines
    head, said, tail = _cut("\n".join(lines), max_chars, what, limit)
    return [*head.split("\n"), said, *tail.split("\n")]


def _joined_length(lines: Sequence[str]) -> int:
    return sum(map(len, lines)) + max(len(lines) - 1, 0)


def _cut(text: str, max_chars: int, what: str, limit: TextLimit) -> tuple[str, str, str]:
    """The head, the note and the tail of ``text`` under ``max_chars``."""
    size = len(text)
    # The longest the note can be (no more than the whole text, no more lines than it
    # has) sizes the room; the note written once the cut is known is never longer.
    widest = note(what, size, text.count("\n") + 1, limit)
    room = max(max_chars - len(widest) - 2, 0)  # the two line breaks around the note
    head_room = int(room * HEAD_SHARE)
    tail_room = room - head_room
    # The head ends at a line break near its end (the break itself is cut: the note's
    # own line break stands for it), the tail starts after one near its start.
    end = head_room
    if head_room:
        found = text.rfind("\n", head_room - head_room // _SNAP, head_room + 1)
        if found >= 0:
            end = found
    start = size - tail_room
    if tail_room:
        found = text.find("\n", start - 1, start + tail_room // _SNAP)
        if found >= 0:
            start = found + 1
    # Never split a surrogate pair (a str can hold one): a lone half cannot be encoded.
    if end and "\ud800" <= text[end - 1] <= "\udbff":
        end -= 1
    if start < size and "\udc00" <= text[start] <= "\udfff":
        start += 1
    # Lines not shown whole: those with a character in text[end:start].
    lines = text.count("\n", end + 1, start - 1) + 1
    return text[:end], note(what, start - end, lines, limit), text[start:]
