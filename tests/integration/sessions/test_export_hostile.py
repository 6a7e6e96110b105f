"""Exporting a crafted log: every recorded string is inert in the notebook.

A log is written by whatever ran: a model, a tool, an MCP server. This one is hostile in
every string the export shows (tool names, arguments, results, approval notes, the task,
what the model wrote, the model's name, run ids, scope names, descriptions, the log's own
file name). The export goes through ``jupyter nbconvert --to html`` and the HTML is read
back: no live ``on*`` attribute, no image or script from outside, no link to
``javascript:``, every code span whole and every table row with its columns; then the
export runs under papermill (a scope name with a newline used to stop it with "No closing
quotation").
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest
from bs4 import BeautifulSoup, Tag

from dsh_jupyter import export_notebook
from dsh_jupyter._magic_line import quote_argument, split_line
from dsh_jupyter.extension import _parser
from dsh_jupyter.sessions import _markdown as md

XSS = "<img src=x onerror=alert(1)>"
BEACON = "![x](http://beacon.example/x.png)"
TOOL = f"grep{XSS}{BEACON}"
ARGUMENTS = {"q": f"``{XSS}``", "p": "a|b"}  # short enough not to be clipped
SCOPE = f"analyst\nof {XSS}"
DESCRIPTION = 'It\'s "quoted",\nwith $(echo no) and `ticks`' + XSS
TASK = f"Find {XSS} and {BEACON} | then [click](javascript:alert(2))\n# not a heading"
SPIN = 'print("ran")\nreturn 2'
STOPPED = f"stopped by {XSS}\n'them' $(x)"
MODEL_TEXT = (f"I will look. {XSS}\n\n{BEACON}\n\n<script>alert(3)</script>\n"
              "[link](javascript:alert(4)) $\\href{javascript:alert(5)}{x}$\n"
              "```\n<img src=y onerror=alert(6)>\n```\n1. a list?\n---")


def hostile_log() -> list[Any]:
    code = "return 1"
    program_args = {"code": code, "description": DESCRIPTION}
    spin = {"code": SPIN, "description": "Spin"}
    return [
        {"kind": "agent/run-start", "run_id": f"run`1`\n{XSS}", "agent": SCOPE,
         "mode": f"code')\n{XSS}",
         "model": f"m``{XSS}", "task": TASK, "max_steps": 5, "time": 10.0},
        {"kind": "agent/message", "run_id": "r", "step": 1, "index": 2, "time": 11.0,
         "message": {"role": "assistant", "content": MODEL_TEXT,
                     "tool_calls": [{"id": "n1"}, {"id": "p1"}, {"id": "n2"}, {"id": "p2"}]}},
        {"kind": "tool/call", "call_id": "n1", "name": TOOL, "agent": SCOPE,
         "arguments": ARGUMENTS, "time": 11.5},
        {"kind": "tool/approval-request", "call_id": "n1", "name": TOOL,
         "reason": f"reads {XSS} | {BEACON}", "agent": SCOPE, "time": 11.6},
        {"kind": "tool/approval", "call_id": "n1", "name": TOOL, "approved": True,
         "answered_by": f"user{XSS}", "note": f"ok ``{XSS}`` | {BEACON}", "time": 11.7},
        {"kind": "tool/result", "call_id": "n1", "name": TOOL, "agent": SCOPE,
         "arguments": ARGUMENTS, "is_error": False, "started": 11.5, "ended": 12.0,
         "content": [{"type": "text", "text": f"found ``{XSS}`` |"}]},
        {"kind": "tool/call", "call_id": "p1", "name": "run_code", "agent": SCOPE,
         "arguments": program_args, "time": 12.0},
        {"kind": "tool/result", "call_id": "p1", "name": "run_code", "agent": SCOPE,
         "arguments": program_args, "is_error": False, "started": 12.0, "ended": 13.0,
         "content": [{"type": "text", "text": "1"}], "meta": {"logs": [], "result": "1"}},
        {"kind": "tool/call", "call_id": "n2", "name": f"fails{XSS}", "agent": SCOPE,
         "arguments": {}, "time": 13.0},
        {"kind": "tool/result", "call_id": "n2", "name": f"fails{XSS}", "agent": SCOPE,
         "arguments": {}, "is_error": True, "started": 13.0, "ended": 13.5,
         "error": {"message": f"bad {XSS} {BEACON} |", "code": f"E{XSS}"},
         "content": [{"type": "text", "text": "Error"}]},
        # A program stopped while its sub-call had been approved: the reason goes on the
        # magic's line (--skip), the approval into the setup's recorded answers.
        {"kind": "tool/call", "call_id": "p2", "name": "run_code", "agent": SCOPE,
         "arguments": spin, "time": 14.0},
        {"kind": "tool/code-dispatch-start", "root_call_id": "p2", "parent_call_id": "p2",
         "call_id": "p2:code:1", "name": f"rm{XSS}", "arguments": {"path": f"a'\n{XSS}"},
         "agent": SCOPE, "time": 14.1},
        {"kind": "tool/approval-request", "call_id": "p2:code:1", "name": f"rm{XSS}",
         "reason": f"r{XSS}", "agent": SCOPE, "time": 14.2},
        {"kind": "tool/approval", "call_id": "p2:code:1", "name": f"rm{XSS}", "approved": True,
         "answered_by": "user", "note": f"n'\"\n{XSS}", "time": 14.3},
        {"kind": "tool/result", "call_id": "p2", "name": "run_code", "agent": SCOPE,
         "arguments": spin, "is_error": True, "started": 14.0, "ended": 19.0,
         "stopped": STOPPED, "content": [{"type": "text", "text": "Error"}],
         "error": {"message": "code run failed (abort): x", "code": "CODE_RUN_FAILED"}},
        {"kind": "agent/run-end", "run_id": "r", "stop": f"answered{XSS}", "steps": 1,
         "tool_calls": 3, "sub_calls": 0, "wall_seconds": 1.0, "answer": None, "time": 14.0,
         "error": {"message": f"oops {XSS}\n{BEACON}", "code": f"C{XSS}"}},
    ]


def test_every_recorded_string_is_inert_in_nbconvert_html(tmp_path: Path) -> None:
    log = tmp_path / f"s{XSS}.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in hostile_log()) + "\n")
    notebook = tmp_path / "hostile.ipynb"
    export_notebook(log, notebook, tools="dsh_jupyter.demo.tools:sample_registry")
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html",
                           str(notebook)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = BeautifulSoup((tmp_path / "hostile.html").read_text(), "html.parser")
    cells = page.select(".jp-Cell")
    assert cells, "no cells in the HTML"
    for cell in cells:
        for element in cell.find_all(True):
            live = [name for name in element.attrs if name.lower().startswith("on")]
            assert not live, (element.name, live, str(element)[:200])
            assert element.name not in ("script", "iframe", "object", "embed"), str(element)
            if element.name == "img":
                assert str(element.get("src", "")).startswith("data:"), str(element)
            if element.name == "a":
                href = str(element.get("href", ""))
                assert href.startswith(("http://", "https://", "#")), str(element)
    markdown = page.select(".jp-Cell.jp-MarkdownCell")
    text = "\n".join(c.get_text() for c in markdown)
    # What was recorded reads as written: the strings are shown, not run.
    for shown in (XSS, BEACON, "[click](javascript:alert(2))", "<script>alert(3)</script>",
                  "# not a heading"):
        assert shown in text, shown
    # Code spans stay whole: the arguments' double backticks do not break out.
    codes = [c.get_text() for cell in markdown for c in cell.find_all("code")]
    assert '{"q": "``' + XSS + '``", "p": "a|b"}' in codes, codes
    assert TOOL in codes and f"m``{XSS}" in codes, codes
    # The calls table keeps its columns: a "|" in a cell is not a column break.
    rows = [row for cell in markdown for row in cell.find_all("tr")]
    assert len(rows) == 3 and {len(row.find_all(["td", "th"])) for row in rows} == {5}, rows
    first = [td.get_text() for td in rows[1].find_all("td")]
    assert first[0] == TOOL and first[2] == "ok", first
    assert first[4] == f"asked (reads {XSS} | {BEACON}), approved by user{XSS}: ok ``{XSS}`` " \
        f"| {BEACON}", first
    assert not page.select(".jp-MarkdownCell h1 ~ h1"), "a recorded line became a heading"


def test_a_hostile_log_runs_again_under_papermill(tmp_path: Path) -> None:
    notebook = tmp_path / "hostile.ipynb"
    nb = export_notebook(hostile_log(), notebook, tools="dsh_jupyter.demo.tools:sample_registry")
    program, stopped = [cell for cell in nb.cells if cell.source.startswith("%%run_code")]
    line, body = program.source.split("\n", 1)
    assert body == "return 1"
    options = _parser("%%run_code").parse_args(split_line(line.removeprefix("%%run_code")))
    assert (options.description, options.scope, options.skip) == (DESCRIPTION, SCOPE, None)
    line, body = stopped.source.split("\n", 1)
    options = _parser("%%run_code").parse_args(split_line(line.removeprefix("%%run_code")))
    assert body == SPIN and options.skip == f"{STOPPED} after 5.0 s in the recorded session"
    assert stopped.metadata["dsh_jupyter"]["stopped"] == {"reason": STOPPED, "seconds": 5.0}
    setup = next(cell for cell in nb.cells if "open_session_registry(" in cell.source)
    assert "mode='code'" in setup.source and repr(SCOPE) in setup.source
    assert repr({"tool": f"rm{XSS}", "arguments": {"path": f"a'\n{XSS}"}, "approved": True,
                 "answered_by": "user", "note": f"n'\"\n{XSS}"}) in setup.source
    papermill.execute_notebook(str(notebook), str(tmp_path / "ran.ipynb"),
                               kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    ran: Any = nbformat.read(tmp_path / "ran.ipynb", as_version=4)  # type: ignore[no-untyped-call]
    again, skipped = [cell for cell in ran.cells if cell.source.startswith("%%run_code")]
    (result,) = [o for o in again.outputs if o.output_type == "execute_result"]
    assert result.data["text/plain"].startswith("[ok] It's \"quoted\",")
    assert [(o.output_type, o.text) for o in skipped.outputs] == [
        ("stream", f"skipped: {STOPPED} after 5.0 s in the recorded session (remove --skip "
                   "from the first line to run it)\n")]


@pytest.mark.parametrize("value", [
    "plain", "two words", "it's", 'say "hi"', "a\nb", "tab\there", "cr\rlf", "back\\slash",
    "$'not ansi'", "-starts-with-dash", "", "nul\x00byte", "line\u2028sep", "é 中 \u200d",
    "ends with backslash\\", "'", "\\'", "$(echo no)", "`ticks`",
])
def test_a_magic_argument_survives_quoting(value: str) -> None:
    quoted = quote_argument(value)
    assert quoted.splitlines() == [quoted] or quoted == "''", quoted  # one line, always
    assert split_line(f"--scope={quoted} --out x") == [f"--scope={value}", "--out", "x"]
    assert split_line(f"--description {quoted}") == ["--description", value]
    if value.isprintable():
        assert shlex.split(quoted) == [value]  # plain shell quoting where it suffices


@pytest.mark.parametrize(("line", "message"), [
    ("--scope $'open", "No closing quotation"),
    ("--scope 'open", "No closing quotation"),
])
def test_a_broken_magic_line_says_why(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_line(line)


@pytest.mark.parametrize(("raw", "shown"), [
    (XSS, XSS), (BEACON, BEACON), ("a | b", "a | b"), ("# h", "# h"), ("1. x", "1. x"),
    ("- x", "- x"), ("---", "---"), ("a\\|b", "a\\|b"), ("$x$", "$x$"), ("~~s~~", "~~s~~"),
    ("&lt;", "&lt;"), ("*em* _em_", "*em* _em_"), ("> q", "> q"), ("snake_case", "snake_case"),
    ("__init__ a__b__c _x", "__init__ a__b__c _x"), ("http://x.example", "http://x.example"),
])
def test_markdown_text_renders_as_written(raw: str, shown: str) -> None:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    html = BeautifulSoup(markdown2html_mistune(md.text(raw)), "html.parser")
    assert html.get_text().strip() == shown
    assert [tag.name for tag in html.find_all(True)] in (["p"], []), html
    cell = markdown2html_mistune(f"| a |\n|---|\n| {md.cell(raw)} |")
    table = BeautifulSoup(cell, "html.parser")
    assert [td.get_text() for td in table.find_all("td")] == [" ".join(shown.split())], cell


@pytest.mark.parametrize("raw", ["a``b", "`", "``x``", "a|b", "a\\|b", "$x$", XSS, "", " x "])
def test_code_spans_hold_any_text(raw: str) -> None:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    expected = " ".join(raw.split())
    html = BeautifulSoup(markdown2html_mistune(md.code(raw)), "html.parser")
    assert [c.get_text() for c in html.find_all("code")] == [expected or " "], html
    table = BeautifulSoup(markdown2html_mistune(f"| a |\n|---|\n| {md.cell_code(raw)} |"),
                          "html.parser")
    cells = table.find_all("td")
    assert len(cells) == 1, table
    code = cells[0].find("code")
    assert isinstance(code, Tag) and code.get_text() == (expected or " "), table
