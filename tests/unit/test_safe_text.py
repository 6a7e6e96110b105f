"""The escaping rules for names and text that leave a run (``dsh_jupyter._safe_text``):
what each character becomes, names one to one, text inert and still readable, JSON values
rebuilt only where they change, and a result handed out with its files' real names."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_jupyter._safe_text import escape_json, escape_name, escape_text, safe_result
from dsh_jupyter.json_value import FrozenDict, FrozenList, JsonValue, snapshot_json
from dsh_jupyter.runtime import CodeRunFailure, CodeRunResult, RunFile

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                 "\ud800-\udfff]")
"""What no escaped text may hold (a tab and a newline are text)."""
ESCAPE = re.compile(r"\\(\\|n|t|r|x[0-9a-f]{2}|u[0-9a-f]{4})")


def name_bytes(escaped: str) -> bytes:
    """An escaped name read back to its bytes, as ``docs/run-files.md`` says to."""
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 1:
            return {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}[code]
        number = int(code[1:], 16)
        return chr(number) if code[0] == "u" or number < 0x80 else chr(0xDC00 + number)
    return ESCAPE.sub(one, escaped).encode("utf-8", "surrogateescape")


@pytest.mark.parametrize(("name", "escaped"), [
    ("plain-name_1.txt", "plain-name_1.txt"),
    ("héllo wörld 日本.csv", "héllo wörld 日本.csv"),   # UTF-8 that is not a control stays
    (os.fsdecode(b"bad\xff\xfe.bin"), "bad\\xff\\xfe.bin"),
    ("esc\x1b[31m.txt", "esc\\x1b[31m.txt"),
    ("nul\x00 bel\x07 del\x7f", "nul\\x00 bel\\x07 del\\x7f"),
    ("new\nline\ttab\rcr", "new\\nline\\ttab\\rcr"),
    ("c1\x85\x9b", "c1\\u0085\\u009b"),
    ("bidi\u202egnp.exe\u2066\u2069\u200e\u200f\u061c", "bidi\\u202egnp.exe\\u2066\\u2069"
     "\\u200e\\u200f\\u061c"),
    ("line\u2028para\u2029", "line\\u2028para\\u2029"),
    ("lone\ud800", "lone\\ud800"),
    ("back\\slash", "back\\\\slash"),
    ("\\xff", "\\\\xff"),          # a name that spells an escape is not one
])
def test_names(name: str, escaped: str) -> None:
    assert escape_name(name) == escaped


@pytest.mark.parametrize(("text", "escaped"), [
    ("plain text\nnext line\tcolumn", "plain text\nnext line\tcolumn"),
    ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),
    ("c1 \x85 csi \x9b", "c1 \\u0085 csi \\u009b"),
    ("bidi \u202eevil", "bidi \\u202eevil"),
    ("C:\\Users\\x1b", "C:\\Users\\x1b"),         # backslashes kept: text is read, not parsed
    ("windows\r\nlines\r\n", "windows\nlines\n"),  # \r\n ends a line
    ("10%\r20%\r100%", "10%\\r20%\\r100%"),        # a progress bar's updates, all readable
    ("form\x0cfeed\x0bvt\x08bs", "form\\x0cfeed\\x0bvt\\x08bs"),
    (os.fsdecode(b"not utf-8: \xff"), "not utf-8: \\xff"),
])
def test_text(text: str, escaped: str) -> None:
    assert escape_text(text) == escaped


@given(st.binary(max_size=40))
def test_a_name_reads_back_to_its_bytes(raw: bytes) -> None:
    """One to one: the escaped name says exactly which bytes the name has."""
    escaped = escape_name(os.fsdecode(raw))
    assert RAW.search(escaped) is None
    escaped.encode("utf-8")  # strict: valid UTF-8
    assert name_bytes(escaped) == raw


@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=40))  # surrogates too
def test_text_is_inert_valid_utf8_and_stable(text: str) -> None:
    escaped = escape_text(text)
    assert RAW.search(escaped) is None
    escaped.encode("utf-8")
    assert escape_text(escaped) == escaped  # applying it twice changes nothing


def test_values_are_rebuilt_only_where_they_change() -> None:
    rows: Any = {"rows": list(range(100)), "name": "ok"}
    value: Any = snapshot_json({"clean": rows, "dirty": ["a\x1b", 1, {"k\u202e": None}]})
    escaped: Any = escape_json(value)
    assert escaped == {"clean": rows, "dirty": ["a\\x1b", 1, {"k\\u202e": None}]}
    assert isinstance(escaped, FrozenDict) and isinstance(escaped["dirty"], FrozenList)
    assert escaped["clean"] is value["clean"]  # shared, not copied
    untouched = snapshot_json({"a": ["b", {"c": [1.5, None, True]}]})
    assert escape_json(untouched) is untouched
    assert escape_json("x\x85") == "x\\u0085" and escape_json(3) == 3


def test_keys_that_escaping_would_merge_stay_apart() -> None:
    """``"a\\x1b"`` (ESC) and ``"a\\\\x1b"`` (a backslash, x, 1, b) would both read
    ``a\\x1b`` as text: that object's keys are escaped as names instead."""
    value = snapshot_json({"a\x1b": 1, "a\\x1b": 2})
    assert escape_json(value) == {"a\\x1b": 1, "a\\\\x1b": 2}


def test_deep_values_need_no_recursion() -> None:
    deep: JsonValue = "bottom\x1b"
    for _ in range(5_000):
        deep = [deep]
    escaped = escape_json(deep)
    for _ in range(5_000):
        assert isinstance(escaped, list)
        escaped = escaped[0]
    assert escaped == "bottom\\x1b"


def test_a_result_is_handed_out_escaped_with_its_files_real_names() -> None:
    raw = b"dir\xff/report\x1b.txt"
    result = CodeRunResult(
        logs=("already escaped \\x1b",), value=snapshot_json({"names": [os.fsdecode(raw)]}),
        failure=CodeRunFailure(kind="exception", message="Traceback\nValueError: \x1b[1mx"),
        files=(RunFile(name=os.fsdecode(raw), size=2, mime_type="text/plain", data=b"hi"),))
    safe = safe_result(result)
    assert safe.logs == result.logs
    assert safe.value == {"names": ["dir\\xff/report\\x1b.txt"]}
    assert safe.failure is not None
    assert safe.failure.message == "Traceback\nValueError: \\x1b[1mx"
    [file] = safe.files
    assert (file.name, file.raw_name, file.data) == ("dir\\xff/report\\x1b.txt", raw, b"hi")
    assert safe_result(safe) is safe  # handed out once: names are not escaped twice
    json.dumps([safe.value, file.name], ensure_ascii=False).encode("utf-8")
    clean = CodeRunResult(logs=("x",), value=1, files=(RunFile(
        name="a.txt", size=0, mime_type="text/plain", data=b"", raw_name=b"a.txt"),))
    assert safe_result(clean) is clean
