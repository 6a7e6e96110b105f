"""Names and text a hostile program sends toward the model and clients, through ``run_code``
on the default (confined) runtime.

The program names files with bytes that are not UTF-8, ESC, a newline, a C1 control,
U+202E and backslashes (one of them spelling an escape: ``\\xff`` literally, next to a real
0xff byte), also as a directory; prints terminal escapes, C1 and bidi controls, a
carriage return and a name that is not UTF-8; and returns what it listed. What must
hold: every name and text that leaves the run is valid UTF-8 with no raw control or bidi
character; each name is escaped one to one (it reads back to exactly the bytes on disk,
and two files never share a name); the host still gets every file's bytes, and the
real name's bytes; and the session log's event is strict UTF-8 JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from reliability_support import Harness, echo_body, json_tool, run_code

from dsh_jupyter.registry.results import ToolSuccess

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]

PROGRAM = r"""
import os
names = [b"bad\xff\xfe.bin", b"\\xff.txt", b"\xff.txt", b"esc\x1b[2Jred.txt", b"new\nline.txt",
         "c1\x85.txt".encode(), "bidi\u202egnp.exe".encode(), b"dir\xff/in\x1b.txt"]
os.mkdir(b"outputs/dir\xff")
for index, name in enumerate(names):
    with open(b"outputs/" + name, "wb") as file:
        file.write(b"content %d" % index)
print("esc \x1b[31mred\x1b[0m \x1b]0;title\x07 | c1 \x9b2J | bidi \u202eevil | del \x7f"
      " | tab\there | 10%\r100%\r")
print("crlf\r\nline")
print(os.fsdecode(b"not utf-8: \xff\xfe"))
return {"listed": sorted(os.listdir("outputs")), os.fsdecode(b"key\xff\x1b"): "\u2066value"}
"""

NAMES = {  # escaped name: the bytes on disk below outputs/, and what the program wrote there
    "\\\\xff.txt": (b"\\xff.txt", b"content 1"),
    "bad\\xff\\xfe.bin": (b"bad\xff\xfe.bin", b"content 0"),
    "bidi\\u202egnp.exe": ("bidi\u202egnp.exe".encode(), b"content 6"),
    "c1\\u0085.txt": ("c1\x85.txt".encode(), b"content 5"),
    "dir\\xff/in\\x1b.txt": (b"dir\xff/in\x1b.txt", b"content 7"),
    "esc\\x1b[2Jred.txt": (b"esc\x1b[2Jred.txt", b"content 3"),
    "new\\nline.txt": (b"new\nline.txt", b"content 4"),
    "\\xff.txt": (b"\xff.txt", b"content 2"),
}
LOGS = ["esc \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 | c1 \\u009b2J | bidi \\u202eevil | "
        "del \\x7f | tab\there | 10%\\r100%",  # its \r before the newline ends the line
        "crlf", "line",
        "not utf-8: \\xff\\xfe"]
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                 "\ud800-\udfff]")
"""No text that leaves a run may hold these (a tab and a newline are text)."""
ESCAPE = re.compile(r"\\(\\|n|t|r|x[0-9a-f]{2}|u[0-9a-f]{4})")


def name_bytes(escaped: str) -> bytes:
    """An escaped name read back to its bytes (``docs/run-files.md``): ``\\xHH`` is a byte,
    ``\\uXXXX`` a character, ``\\\\`` a backslash."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 1:
            return {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}[code]
        number = int(code[1:], 16)
        return chr(number) if code[0] == "u" or number < 0x80 else chr(0xDC00 + number)
    return ESCAPE.sub(one, escaped).encode("utf-8", "surrogateescape")


def strict_json(value: Any) -> bytes:
    """``value`` as the UTF-8 JSON a client is sent (strict: a lone surrogate raises)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


async def test_names_and_text_leave_a_run_escaped(harness: Harness) -> None:
    """A name that is not UTF-8 (and names with ESC, a newline, C1, U+202E) arrives
    escaped, one to one, and its file's bytes still reach the host."""
    registry, log = await harness.registry(json_tool("echo", echo_body))
    result = await run_code(registry, PROGRAM)
    assert isinstance(result, ToolSuccess), result
    log.settlement()
    value: Any = result.value
    # The model: escaped names, in the order of the bytes on disk.
    listed = [entry["name"] for entry in value["files"]]
    assert listed == list(NAMES)
    assert all(entry["size"] == 9 and "not_collected" not in entry for entry in value["files"])
    for name in NAMES:
        assert f"\n- {name} (9 bytes, " in result.text
    # What it printed and returned: text, escaped (a newline and a tab stay text).
    assert value["logs"] == LOGS
    assert value["result"] == {
        "listed": ["\\xff.txt", "bad\\xff\\xfe.bin", "bidi\\u202egnp.exe", "c1\\u0085.txt",
                   "dir\\xff", "esc\\x1b[2Jred.txt", "new\nline.txt", "\\xff.txt"],
        "key\\xff\\x1b": "\\u2066value"}
    # Valid UTF-8 everywhere, nothing raw.
    strict_json(value)
    assert RAW.search(result.text) is None, ascii(result.text)
    assert not any(RAW.search(line) for line in value["logs"])
    # The host: every file's bytes, under its escaped name, with the real name's bytes.
    attached = {file.name: (file.raw_name, file.data) for file in result.attachments}
    assert attached == NAMES
    assert all(name_bytes(name) == raw for name, (raw, _data) in NAMES.items())
    # The session log (and the card): names and previews escaped, strict UTF-8 JSON.
    [logged] = [event for event in log.events if event["kind"] == "tool/result"]
    strict_json(logged)
    meta: Any = logged["meta"]
    assert [entry["name"] for entry in meta["files"]] == list(NAMES)
    assert not await harness.finish()
