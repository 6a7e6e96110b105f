"""Checking programs before they run (``ToolRegistry(check_programs=...)``), with the real
checker (``ty server``), a real registry of the 20 realistic tools and real kernels.

- ``error``: each kind of mistake (typos, wrong argument types, missing awaits, a wrong
  field read from a typed output) fails as ``type-check`` at the program's own lines, with
  no kernel used and no sub-call made;
- ``warn``: the program runs and the problems come back with its result (or its failure);
- valid but dynamic programs run, checked, on a kernel;
- the checker starts once per registry, stops with it, and a checker that fails lets the
  program run unchecked, saying so.

The rules on which diagnostics are problems, without a checker, are in
tests/unit/codemode/test_check.py."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sdk_support import realistic_tools

from dsh_jupyter import ToolCall, ToolRegistry, default_render, define_tool
from dsh_jupyter.codemode import checker as checker_module
from dsh_jupyter.codemode.checker import ProgramChecker, ProgramCheckWarning
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig, StatefulConfig
from dsh_jupyter.registry.execution import ToolRunContext
from dsh_jupyter.registry.results import ToolResult
from dsh_jupyter.runtime import CodeRunResult, RunRequest, RuntimeInfo

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

FAILED = "Error: code run failed (type-check): the program was not run: "

# What the tools that dynamic programs call return (valid against their output schemas).
CANNED: dict[str, Any] = {
    "read_file": {"path": "/w/a.py", "offset": 1, "lines": [{"number": 1, "text": "x = 1"}],
                  "total_lines": 1, "truncated": False},
    "glob": {"paths": ["a.py", "b.py"], "total": 2, "truncated": False},
    "git_diff": '{"a": {"b": [7]}}',
    "git_status": {"branch": "main", "ahead": 0, "behind": 0, "files": []},
    "kv_get": {"found": True, "value": {"deep": [0, 1, 2, "three"]}},
    "kv_set": {"key": "k", "version": 1},
    "edit_file": {"path": "a", "applied": 1, "diff": ""},
    "bash": {"exit_code": 0, "signal": None, "stdout": "", "stderr": "", "timed_out": False},
    "sql_query": {"columns": [], "rows": [], "truncated": False},
}


class Counted:
    """A real runtime that counts the runs it was given (a rejected program gets none)."""

    def __init__(self, runtime: KernelRuntime) -> None:
        self.runtime = runtime
        self.runs = 0

    @property
    def info(self) -> RuntimeInfo:
        return self.runtime.info

    async def run(self, request: RunRequest) -> CodeRunResult:
        self.runs += 1
        return await self.runtime.run(request)


class Realistic:
    """The 20 realistic tools (their real SDK) in a registry on a counted kernel runtime;
    ``calls`` lists the sub-calls that reached a tool body."""

    def __init__(self, runtime: KernelRuntime, check: Any, mode: Any = "code") -> None:
        self.runtime = Counted(runtime)
        self.calls: list[str] = []
        self.registry = ToolRegistry(mode=mode, code_runtime=self.runtime,
                                     check_programs=check)
        for tool in realistic_tools():
            self.registry.register(define_tool(
                name=tool.name, description=tool.description, parameters=tool.parameters,
                output={"schema": tool.output, "render": default_render},
                allow_unsupported_schema=True, execute=self._body(tool.name)))

    def _body(self, name: str) -> Any:
        def execute(args: Any, ctx: ToolRunContext) -> Any:
            self.calls.append(name)
            return CANNED[name]

        return execute

    async def run(self, code: str, call_id: str = "r1") -> ToolResult:
        return await self.registry.execute(ToolCall(
            call_id=call_id, name="run_code",
            arguments={"code": code, "description": "test"}))


@pytest.fixture
async def runtime() -> AsyncIterator[KernelRuntime]:
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        yield runtime


# Each program, and the (line, rule) of every problem the check must report: no other.
MISTAKES: dict[str, tuple[str, list[tuple[int, str]], str]] = {
    "a typo in a key": (
        'print("reading")\npage = await tools.read_file({"pth": "README.md"})\n'
        'return page["total_lines"]',
        [(2, "missing-typed-dict-key"), (2, "unknown-typed-dict-constructor-key")],
        'Unknown key "pth" for TypedDict `ReadFileArgs` - did you mean "path"?'),
    "a typo in a tool's name": (
        'hits = await tools.gerp({"pattern": "def "})\nprint(hits)',
        [(1, "missing-attribute")], "Object of type `Tools` has no attribute `gerp`"),
    "a typo in a name": (
        'status = await tools.git_status({})\n\nfor f in status["files"]:\n'
        '    print(f["path"], stauts)',
        [(4, "unresolved-reference")], "Name `stauts` used when not defined"),
    "a wrong argument type": (
        'page = await tools.read_file({"path": "a.py", "limit": "10"})',
        [(1, "invalid-argument-type")],
        'Invalid argument to key "limit" with declared type `int` on TypedDict '
        '`ReadFileArgs`: value of type `Literal["10"]`'),
    "a wrong type deep in a literal": (
        'edits = [{"kind": "insert", "after_line": 0, "text": "x"}]\n'
        'await tools.edit_file({"path": "a", "edits": edits})\n'
        'await tools.edit_file({"path": "a",\n'
        '                       "edits": [{"kind": "insert", "after_line": "0", "text": "x"}]})',
        [(4, "invalid-argument-type")], 'Invalid argument to key "edits"'),
    "a value not in the enum": (
        'await tools.web_search({"query": "ty", "recency": "decade"})',
        [(1, "invalid-argument-type")], 'value of type `Literal["decade"]`'),
    "no dict at all": (
        'await tools.read_file("README.md")', [(1, "invalid-argument-type")],
        'found `Literal["README.md"]`'),
    "a missing await, the result used": (
        'page = tools.read_file({"path": "a.py"})\nprint(page["lines"])',
        [(2, "not-subscriptable")],
        "Cannot subscript object of type `CoroutineType[Any, Any, ReadFileOutput]`"),
    "a missing await, the call alone": (
        'await tools.kv_set({"key": "k", "value": 1})\ntools.git_diff({})\nprint("done")',
        [(2, "unused-awaitable")], "Object of type `CoroutineType[Any, Any, str]` is not "
                                   "awaited"),
    "a missing await, a method of the result": (
        'diff = tools.git_diff({})\nprint(diff.splitlines())',
        [(2, "missing-attribute")], "has no attribute `splitlines`"),
    "a wrong field read": (
        'page = await tools.read_file({"path": "a.py"})\nprint(page["line"])',
        [(2, "invalid-typed-dict-key")],
        'Unknown key "line" for TypedDict `ReadFileOutput` - did you mean "lines"?'),
    "a wrong field read, nested": (
        'found = await tools.grep({"pattern": "x"})\nfor f in found["files"]:\n'
        '    for m in f["matches"]:\n        print(m["line_number"])',
        [(4, "invalid-typed-dict-key")], 'Unknown key "line_number" for TypedDict'),
    "a field read as an attribute": (
        'log = await tools.git_log({"max_count": 1})\nprint(log[0].sha)',
        [(2, "missing-attribute")], "has no attribute `sha`"),
    "a field of the wrong type": (
        'status = await tools.git_status({})\nbehind: str = status["behind"]',
        [(2, "invalid-assignment")], "Object of type `int` is not assignable to `str`"),
    "a syntax error": ('x = (1,\nprint(x)', [(1, "syntax")], "'(' was never closed"),
}


@pytest.mark.parametrize("case", list(MISTAKES))
async def test_error_rejects_a_mistake_before_any_kernel(runtime: KernelRuntime,
                                                         case: str) -> None:
    program, expected, words = MISTAKES[case]
    realistic = Realistic(runtime, "error")
    async with realistic.registry:
        result = await realistic.run(program)
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    head, *lines = result.text.split("\n")
    count = f"{len(expected)} problem{'s' if len(expected) != 1 else ''}"
    assert head == (f"{FAILED}checked against the tools' SDK, it has {count} (fix and run it "
                    f"again)")
    assert [_line_and_rule(line) for line in lines] == expected, result.text
    assert words in result.text
    assert realistic.runtime.runs == 0 and realistic.calls == []  # no kernel, no sub-call
    assert "/tmp" not in result.text and "_dsh_sdk" not in result.text


def _line_and_rule(text: str) -> tuple[int, str]:
    assert text.startswith("line ") and text.endswith("]"), text
    return int(text.split(":", 1)[0][5:]), text.rsplit("[", 1)[1][:-1]


# Valid programs the checker cannot fully see through: each must run, checked.
DYNAMIC: dict[str, str] = {
    "getattr": 'name = "kv_get"\nvalue = await getattr(tools, name)({"key": "x"})\n'
               'print(value["value"]["deep"][3])',
    "subscript": 'status = await tools["git_status"]({})\nprint(status["branch"])',
    "arguments in a variable": 'args = {"path": "a.py"}\npage = await tools.read_file(args)\n'
                               'print(page["total_lines"])',
    "arguments built in a loop": 'for p in ["a", "b"]:\n    args = {"path": p}\n'
                                 '    args["limit"] = 3\n    await tools.read_file(args)',
    "a list built up": 'edits = []\nedits.append({"kind": "insert", "after_line": 0, '
                       '"text": "x"})\nawait tools.edit_file({"path": "a", "edits": edits})',
    "unpacked": 'base = {"path": "a.py"}\nawait tools.read_file({**base, "limit": 3})\n'
                'await tools.read_file({**base})',
    "keywords": 'page = await tools.read_file(path="a.py", limit=3)\nprint(page["lines"])',
    "results are plain dicts": 'page = await tools.read_file({"path": "a"})\n'
                               'page["seen"] = True\ndel page["truncated"]\n'
                               'page.pop("offset")\nreturn sorted(page)',
    "third-party imports": 'try:\n    import numpy_that_is_not_here as np\n'
                           'except ImportError:\n    np = None\nprint(np)',
    "json as Any": 'import json\ndata = json.loads(await tools.git_diff({}))\n'
                   'return data["a"]["b"][0]',
    "gather": 'pages = await asyncio.gather(*[tools.read_file({"path": p}) '
              'for p in ["a", "b"]])\nreturn [p["total_lines"] for p in pages]',
    "print anything": 'print(tools, ToolCallError, asyncio, print, object(), None)',
    "comprehensions": 'keys = ["a", "b"]\nawait tools.kv_set({"key": "k", '
                      '"value": {k: 1 for k in keys}})\n'
                      'await tools.bash({"command": "ls", "env": {k: "1" for k in keys}})',
    "errors handled": 'try:\n    await tools.bash({"command": "ls"})\n'
                      'except ToolCallError as err:\n    print(err.tool_name, err.message)',
    "helpers of its own": 'async def lines(path):\n    page = await tools.read_file({"path": '
                          'path})\n    return page["lines"]\nreturn len(await lines("a"))',
    "annotated with the SDK's types": 'page: ReadFileOutput = await tools.read_file({"path": '
                                      '"a"})\nprint(page["lines"][0]["text"])',
    "guarded names": 'import random\nif random.random() < 2:\n    seen = 1\nprint(seen)',
    "params from elsewhere": 'params = ["a", 1, None]\n'
                             'await tools.sql_query({"query": "select ?", "params": params})',
}


async def test_valid_dynamic_programs_run_checked(runtime: KernelRuntime) -> None:
    realistic = Realistic(runtime, "error")
    async with realistic.registry:
        for n, (case, program) in enumerate(DYNAMIC.items()):
            result = await realistic.run(program, call_id=f"r{n}")
            assert result.error is None, f"{case}: {result.text}"
            assert "Type check" not in result.text, case
    assert realistic.runtime.runs == len(DYNAMIC)


async def test_warn_runs_the_program_and_appends_the_problems(runtime: KernelRuntime) -> None:
    realistic = Realistic(runtime, "warn")
    async with realistic.registry:
        ran = await realistic.run('diff = await tools.git_diff({})\n\nsize: int = diff\n'
                                  'print("ran")\nreturn len(diff)')
        failed = await realistic.run('print("before")\npage = tools.read_file({"path": "a"})\n'
                                     'print(page["lines"])', call_id="r2")
        clean = await realistic.run('return 1', call_id="r3")
    problem = "line 3: Object of type `str` is not assignable to `int` [invalid-assignment]"
    assert ran.error is None and ran.value == {"logs": ["ran"], "result": 17,
                                               "type_check": [problem]}
    assert ran.text == f"ran\n17\nType check (the program ran anyway):\n{problem}"
    # The run failed on what the check saw: the failure says both, then what it printed.
    assert failed.error is not None and failed.error.code == "CODE_RUN_FAILED"
    assert failed.text.startswith("Error: code run failed (exception): Traceback")
    # (The kernel may add Python's "coroutine ... was never awaited" to the captured lines.)
    assert (
        "TypeError: 'coroutine' object is not subscriptable\n"
        "Type check (the program ran anyway):\n"
        "line 3: Cannot subscript object of type `CoroutineType[Any, Any, ReadFileOutput]` "
        "with no `__getitem__` method [not-subscriptable]\nCaptured output:\nbefore"
    ) in failed.text
    assert clean.value == {"logs": [], "result": 1}  # nothing found: the value as before
    assert realistic.runtime.runs == 3 and realistic.calls == ["git_diff"]


async def test_a_stateful_runtime_knows_earlier_runs_names() -> None:
    config = KernelRuntimeConfig(pool_size=0, stateful=StatefulConfig())
    async with KernelRuntime(config) as runtime:
        realistic = Realistic(runtime, "error")
        async with realistic.registry:
            first = await realistic.run('total = 40')
            second = await realistic.run('return total + 2', call_id="r2")
            typo = await realistic.run('await tools.read_file({"pth": "a"})', call_id="r3")
    assert first.error is None and second.value == {"logs": [], "result": 42}
    assert typo.text.startswith(FAILED)  # the rest is still checked


async def test_discovery_programs_are_checked_against_the_whole_catalog(
        runtime: KernelRuntime) -> None:
    realistic = Realistic(runtime, "error", mode="discovery")
    async with realistic.registry:
        typo = await realistic.run('hits = await tools.search("read a file", limit=3)\n'
                                   'print(await tools.describe(hits[0]["name"]))\n'
                                   'await tools.read_file({"pth": "a"})')
        valid = await realistic.run('hits = await tools.search("read a file", limit=3)\n'
                                    'print(hits[0]["name"])\n'
                                    'page = await tools.read_file({"path": "a"})\n'
                                    'return page["total_lines"]', call_id="r2")
    assert typo.text.startswith(FAILED) and "line 3: Unknown key \"pth\"" in typo.text
    assert valid.error is None and valid.value == {"logs": ["read_file"], "result": 1}


async def test_the_checker_starts_once_and_stops_with_the_registry(
        runtime: KernelRuntime) -> None:
    realistic = Realistic(runtime, "error")
    checker = realistic.registry._checker
    assert checker.server_starts == 0  # nothing starts before a program is checked
    for n in range(3):
        result = await realistic.run(f'print(await tools.glob({{"pattern": "{n}"}}))',
                                     call_id=f"r{n}")
        assert result.error is None
    assert checker.server_starts == 1
    server = checker._server
    assert server is not None and server._process is not None
    process = server._process
    directory = server._directory
    await realistic.registry.aclose()
    assert process.poll() is not None and directory is not None and not directory.exists()
    again = await realistic.run('return 1', call_id="again")  # a new server, on demand
    assert again.error is None and checker.server_starts == 1 and checker._server is not server
    await realistic.registry.aclose()


async def test_a_checker_that_fails_lets_the_program_run_unchecked(
        runtime: KernelRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "ty"
    broken.write_text("#!/bin/sh\necho 'not a language server'\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(checker_module, "find_ty", lambda: os.fspath(broken))
    realistic = Realistic(runtime, "error")
    async with realistic.registry:
        with pytest.warns(ProgramCheckWarning, match=r"the type checker failed \(.*\); the "
                                                     r"program ran unchecked"):
            result = await realistic.run('await tools.read_file({"pth": "a"})\nprint("ran")')
    # Unchecked, the program ran (and the stand-in tool took the misspelt key).
    assert result.value == {"logs": ["ran"]}
    assert realistic.runtime.runs == 1 and realistic.calls == ["read_file"]


async def test_a_checker_that_hangs_is_given_up_on_without_blocking_the_loop(
        runtime: KernelRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check waits on its own thread: the loop keeps ticking while a server that never
    answers runs out its time; then it is killed and the program is left unchecked."""
    hanging = tmp_path / "ty"
    hanging.write_text("#!/bin/sh\nexec sleep 60\n")
    hanging.chmod(hanging.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(checker_module, "find_ty", lambda: os.fspath(hanging))
    monkeypatch.setattr(checker_module, "CHECK_TIMEOUT_SECONDS", 0.5)
    checker = ProgramChecker(Realistic(runtime, "error").registry)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.ensure_future(tick())
    start = time.monotonic()
    try:
        with pytest.warns(ProgramCheckWarning, match=r"did not answer within 0\.5 s"):
            check = await checker.check('await tools.read_file({"pth": 1})', None,
                                        discovery=False, stateful=False)
    finally:
        ticker.cancel()
        await checker.aclose()
    assert check.problems == () and check.unchecked is not None
    assert 0.5 <= time.monotonic() - start < 2  # given up on, and killed at once
    assert ticks >= 20  # ~100 if nothing else ran; the loop was never held for the wait
