"""Checking a program before it runs, without a checker: the document the checker reads,
which of its diagnostics are the program's problems (and at which line), how they read,
and the registry's option. Diagnostics here are shaped as ``ty server`` sends them; the
same rules against the real checker and a real kernel are in
tests/kernel/test_check_programs.py."""

from __future__ import annotations

import ast

import pytest
from code_mode_support import code_registry, echo

from dsh_jupyter.codemode import checker as checker_module
from dsh_jupyter.codemode.check import (
    MAX_PROBLEMS,
    PREAMBLE_LINES,
    ProgramProblem,
    check_document,
    check_sdk,
    failure_text,
    problem_lines,
    program_problems,
    sdk_module_name,
)
from dsh_jupyter.codemode.run_code import run_code_content, run_code_meta
from dsh_jupyter.codemode.sdk_python import SdkTool
from dsh_jupyter.codemode.ty_server import Diagnostic
from dsh_jupyter.errors import RegistrationError
from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.runtime import FAILURE_KINDS


def at(program: str, line: int, text: str, rule: str, message: str, *,
       severity: int = 1, nth: int = 0) -> Diagnostic:
    """A diagnostic at the ``nth`` occurrence of ``text`` on program line ``line``, in the
    document's coordinates (as the checker reports it)."""
    source = program.split("\n")[line - 1]
    column = source.index(text)
    for _ in range(nth):
        column = source.index(text, column + 1)
    column = len(source[:column].encode())
    return Diagnostic(line=PREAMBLE_LINES + line - 1, column=column + 4, severity=severity,
                      code=rule, message=message)


def problems(program: str, *diagnostics: Diagnostic, stateful: bool = False) -> list[str]:
    found = program_problems(program, ast.parse(program), diagnostics, stateful=stateful)
    return [problem.text() for problem in found]


def test_the_document_keeps_the_programs_lines() -> None:
    program = 'x = 1\n\nif x:\n    s = """a\n\nb"""\r\nreturn s\rprint(x)'
    document = check_document(program, "_dsh_sdk_abc")
    lines = document.splitlines()
    assert lines[:PREAMBLE_LINES] == [
        "from _dsh_sdk_abc import *", "import asyncio", "tools: Tools", "display: Any",
        "get_ipython: Any", "async def __program():"]
    # Line n of the program is line PREAMBLE_LINES + n, indented; blank lines stay blank.
    assert lines[PREAMBLE_LINES:] == ["    x = 1", "", "    if x:", '        s = """a', "",
                                      '    b"""', "    return s", "    print(x)"]
    assert check_document("", "m").endswith("async def __program():\n    pass\n")
    assert check_document("# only a comment", "m").endswith("    # only a comment")


def test_the_sdk_module_is_the_prompts_and_named_by_its_text() -> None:
    tool = SdkTool(name="search", description="Find.", parameters={"type": "object"},
                   output={"type": "string"})
    code = check_sdk([tool], discovery=False)
    assert "async def search(self, args: dict[str, Any]) -> str" in code
    discovery = check_sdk([tool], discovery=True)
    # Under discovery the helpers own tools.search; the tool is reached by subscript.
    assert "async def search(self, query: str, limit: int = 10)" in discovery
    assert 'tools["search"](args: dict[str, Any]) -> str' in discovery
    assert sdk_module_name(code) == sdk_module_name(code) != sdk_module_name(discovery)
    assert sdk_module_name(code).isidentifier()


def test_problems_are_at_the_programs_lines_errors_only() -> None:
    program = 'page = await tools.read_file({"pth": "a"})\nprint(page["line"])\nn = 1'
    found = problems(
        program,
        at(program, 1, "{", "missing-typed-dict-key",
           "Missing required key 'path' in TypedDict `ReadFileArgs` constructor"),
        at(program, 1, '"pth"', "unknown-typed-dict-constructor-key",
           'Unknown key "pth" for TypedDict `ReadFileArgs` - did you mean "path"?\n\n'
           'help: Replace with "path"'),
        at(program, 2, '"line"', "invalid-typed-dict-key",
           'Unknown key "line" for TypedDict `ReadFileOutput` - did you mean "lines"?'),
        at(program, 3, "n", "", "`n` is unused", severity=4),  # a hint: not a problem
        at(program, 3, "n", "deprecated", "old", severity=2),  # a warning: not a problem
        Diagnostic(line=2, column=0, severity=1, code="invalid-syntax", message="preamble"),
    )
    assert found == [
        "line 1: Missing required key 'path' in TypedDict `ReadFileArgs` constructor "
        "[missing-typed-dict-key]",
        'line 1: Unknown key "pth" for TypedDict `ReadFileArgs` - did you mean "path"? '
        "[unknown-typed-dict-constructor-key]",
        'line 2: Unknown key "line" for TypedDict `ReadFileOutput` - did you mean "lines"? '
        "[invalid-typed-dict-key]",
    ]


def test_a_dict_built_elsewhere_is_trusted_a_literal_is_not() -> None:
    program = ('args = {"path": "a"}\nawait tools.read_file(args)\n'
               'await tools.edit_file({"path": "a", "edits": [e]})\n'
               'await tools.edit_file({"path": "a", "edits": [{"kind": "insert", "n": "0"}]})\n'
               'await tools.read_file({"path": ["a"]})\n'
               'x: str = await tools.git_log({})')
    outer = ("Argument to bound method `Tools.edit_file` is incorrect: Expected "
             "`EditFileArgs`, found `dict[str, str | list[dict[str, str]]]`")
    edits = ('Invalid argument to key "edits" with declared type `list[Replace | Insert]` on '
             'TypedDict `EditFileArgs`: value of type `list[dict[str, str]]`')
    found = problems(
        program,
        at(program, 2, "args", "invalid-argument-type",
           "Argument to bound method `Tools.read_file` is incorrect: Expected `ReadFileArgs`, "
           "found `dict[str, str]`"),
        at(program, 3, "{", "invalid-argument-type", outer),
        at(program, 3, "[", "invalid-argument-type", edits),
        at(program, 4, "{", "invalid-argument-type", outer),
        at(program, 4, "[", "invalid-argument-type", edits),
        at(program, 5, "{", "invalid-argument-type",
           "Argument to bound method `Tools.read_file` is incorrect: Expected `ReadFileArgs`, "
           "found `dict[str, list[str]]`"),
        at(program, 5, "[", "invalid-argument-type",
           'Invalid argument to key "path" with declared type `str` on TypedDict '
           "`ReadFileArgs`: value of type `list[str]`"),
        at(program, 6, "await", "invalid-assignment",
           "Object of type `list[GitLogOutputItem]` is not assignable to `str`"),
    )
    # Lines 2 and 3 hold values built from variables; on 4 and 5 the literal's innermost
    # mismatch is told, not the call's; a list where a str is declared is no shape question.
    assert found == [f"line 4: {edits} [invalid-argument-type]",
                     'line 5: Invalid argument to key "path" with declared type `str` on '
                     "TypedDict `ReadFileArgs`: value of type `list[str]` "
                     "[invalid-argument-type]",
                     "line 6: Object of type `list[GitLogOutputItem]` is not assignable to "
                     "`str` [invalid-assignment]"]


def test_results_are_plain_dicts_and_keywords_make_the_dict() -> None:
    program = ('page = await tools.read_file(path="a")\npage["extra"] = 1\ndel page["lines"]\n'
               'page.pop("offset")\npage.setdefault("x", 1)\nprint(page["nope"])\n'
               'await tools.read_file({**base})\nawait tools.read_file({})')
    missing = "Missing required key 'path' in TypedDict `ReadFileArgs` constructor"
    found = problems(
        program,
        at(program, 1, "path", "unknown-argument", "Argument `path` does not match"),
        at(program, 1, "tools", "missing-argument", "No argument provided for `args`"),
        at(program, 2, '"extra"', "invalid-typed-dict-key", 'Unknown key "extra"'),
        at(program, 3, '"lines"', "invalid-argument-type", 'Cannot delete required key "lines"'),
        at(program, 4, '"offset"', "invalid-argument-type", "Cannot pop required field 'offset'"),
        at(program, 5, '"x"', "invalid-typed-dict-key", 'Unknown key "x"'),
        at(program, 6, '"nope"', "invalid-typed-dict-key", 'Unknown key "nope"'),
        at(program, 7, "{", "missing-typed-dict-key", missing),
        at(program, 8, "{", "missing-typed-dict-key", missing),
    )
    assert found == ['line 6: Unknown key "nope" [invalid-typed-dict-key]',
                     f"line 8: {missing} [missing-typed-dict-key]"]


def test_a_stateful_runs_names_may_be_earlier_runs() -> None:
    program = "print(df.head())"
    diagnostic = at(program, 1, "df", "unresolved-reference", "Name `df` used when not defined")
    assert problems(program, diagnostic) == [
        "line 1: Name `df` used when not defined [unresolved-reference]"]
    assert problems(program, diagnostic, stateful=True) == []


def test_columns_count_utf8_bytes_as_ast_does() -> None:
    program = 'é = "é"; page = await tools.read_file({"path": "a"}); page["x"] = 1'
    diagnostic = at(program, 1, '"x"', "invalid-typed-dict-key", 'Unknown key "x"')
    assert problems(program, diagnostic) == []  # found inside the write, past the é's


def test_how_problems_read() -> None:
    many = [ProgramProblem(line=n, rule="r", message="m") for n in range(1, MAX_PROBLEMS + 3)]
    lines = problem_lines(many)
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1] == "(and 2 more)"
    assert lines[0] == "line 1: m [r]"
    assert failure_text(many[:1]) == (
        "the program was not run: checked against the tools' SDK, it has 1 problem (fix and "
        "run it again)\nline 1: m [r]")
    value: dict[str, JsonValue] = {"logs": ["hi"], "result": 2,
                                   "type_check": ["line 1: m [r]"]}
    text = run_code_content(value, None)[0]
    assert text == {"type": "text",
                    "text": "hi\n2\nType check (the program ran anyway):\nline 1: m [r]"}
    meta = run_code_meta(value, None, ())
    assert isinstance(meta, dict) and meta["type_check"] == ["line 1: m [r]"]
    assert "type-check" in FAILURE_KINDS


def test_the_registry_option() -> None:
    registry = code_registry()
    registry.register(echo())
    assert registry.check_programs == "off"
    registry.check_programs = "warn"
    assert code_registry(check_programs="error").check_programs == "error"
    with pytest.raises(RegistrationError, match=r"check_programs must be one of 'off', "
                                                r"'warn', 'error', got 'strict'"):
        code_registry(check_programs="strict")


def test_a_missing_checker_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checker_module, "find_ty", lambda: None)
    message = (r"check_programs needs the ty type checker, which is not installed: "
               r"pip install 'dsh-jupyter\[check\]' \(or put `ty` on PATH\), or set "
               r"check_programs='off'")
    with pytest.raises(RegistrationError, match=message):
        code_registry(check_programs="warn")
    registry = code_registry()
    with pytest.raises(RegistrationError, match=message):
        registry.check_programs = "error"
    assert registry.check_programs == "off"
    code_registry(check_programs="off")  # off needs no checker
