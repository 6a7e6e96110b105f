"""The files of a run_code program, as Code Mode hands them out (see ``docs/run-files.md``).

Three readers, three shapes:

- **the model** reads the value's ``files`` (``[{name, size, mime_type}]``, plus
  ``not_collected`` with the reason for a file over a cap) and one line per file in the
  content. Never their bytes: a program that wants the model to read a file prints it,
  so the model's context holds only what the program chose to show.
- **the user** gets the bytes: each collected file is attached to the ``ToolSuccess``
  (``result.attachments``, :class:`~dsh_jupyter.runtime.RunFile`).
- **the card and the session log** read ``presentation_meta["files"]`` (the value's files,
  with the bytes of the attached ones: :func:`files_of`): name, size, type,
  the first lines of a text file (:data:`PREVIEW_LINES`, at most :data:`PREVIEW_BYTES`,
  control and bidi characters escaped as in the program's output)
  and, for a small file, its bytes as base64 for a download link (at most
  :data:`CARD_FILE_BYTES` a file and :data:`CARD_TOTAL_BYTES` a run, so a log stays a
  log). Larger files are in ``result.attachments`` only.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any, cast

from .._safe_text import escape_text
from ..json_value import JsonObject, JsonValue
from ..runtime import CodeRunResult, RunFile

PREVIEW_LINES = 20
PREVIEW_BYTES = 4096
CARD_FILE_BYTES = 64 * 1024
"""The largest file whose bytes go in the card's meta (a download link)."""
CARD_TOTAL_BYTES = 256 * 1024
"""The bytes of all the files of one run that go in its meta, at most."""
FILES_HEADING = "Files the program wrote to outputs/ (kept for the user, contents not shown):"
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript",
               "application/x-sh", "application/x-python", "application/x-yaml")


def files_instructions(input_names: Sequence[str]) -> str:
    """The prompt section of a runtime with inputs (none without: the default prompt is
    unchanged)."""
    listed = ", ".join(f"`inputs/{name}`" for name in input_names)
    return ("Files: each program runs in a working directory holding read-only input files "
            f"under `inputs/`: {listed}. Files a program writes under `outputs/` are "
            "returned to the user after the run; the run_code result lists them (name, size, "
            "type) without their contents, so print what you need to read.")


def file_entries(result: CodeRunResult) -> list[JsonValue]:
    """The value's ``files``: what the model reads of each file."""
    entries: list[JsonValue] = []
    for file in result.files:
        entry: dict[str, JsonValue] = {"name": file.name, "size": file.size,
                                       "mime_type": file.mime_type}
        if file.not_collected is not None:
            entry["not_collected"] = file.not_collected
        entries.append(entry)
    return entries


def file_lines(value: JsonObject) -> list[str]:
    """The content's lines about the files in ``value`` (none without files)."""
    files = cast(list[dict[str, JsonValue]], value.get("files") or [])
    omitted = value.get("files_omitted")
    if not files and not omitted:
        return []
    lines = [FILES_HEADING]
    for file in files:
        line = f"- {file['name']} ({file['size']} bytes, {file['mime_type']})"
        if "not_collected" in file:
            line += f": not collected ({file['not_collected']})"
        lines.append(line)
    if omitted:
        lines.append(f"- … and {omitted} more not listed")
    return lines


def is_text(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in _TEXT_TYPES or mime_type.endswith(
        ("+json", "+xml"))


def card_entries(files: Sequence[RunFile]) -> list[JsonValue]:
    """``presentation_meta["files"]``: what the card and the session log keep."""
    entries: list[JsonValue] = []
    budget = CARD_TOTAL_BYTES
    for file in files:
        entry: dict[str, JsonValue] = {"name": file.name, "size": file.size,
                                       "mime_type": file.mime_type}
        if file.data is None:
            entry["not_collected"] = file.not_collected or "not collected"
        else:
            if is_text(file.mime_type):
                head = file.data[:PREVIEW_BYTES].decode("utf-8", errors="replace")
                entry["preview"] = escape_text("\n".join(head.split("\n")[:PREVIEW_LINES]))
            if len(file.data) <= min(CARD_FILE_BYTES, budget):
                budget -= len(file.data)
                entry["data"] = base64.b64encode(file.data).decode("ascii")
        entries.append(entry)
    return entries


def files_of(value: JsonObject, attachments: Sequence[RunFile]) -> list[RunFile]:
    """The files of a run's ``value`` (its ``files``), each with its bytes when it is one
    of ``attachments`` (the collected files the body attached to the call)."""
    collected = {file.name: file for file in attachments}
    files: list[RunFile] = []
    for entry in cast(list[dict[str, Any]], value.get("files") or []):
        file = collected.get(entry["name"])
        if file is None:
            file = RunFile(name=entry["name"], size=entry["size"], mime_type=entry["mime_type"],
                           not_collected=entry.get("not_collected"))
        files.append(file)
    return files
