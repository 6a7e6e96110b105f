"""Cost of the Python SDK: render time, and prompt bytes against native schemas.

Prints the median time to render the SDK for 1,000 tools (the 20 realistic
tools of ``tests/golden/sdk/realistic.tools.json``, renamed and repeated), and
for the 20 realistic tools the bytes of the Code Mode SDK section (instructions
+ module) next to the bytes of the native function schemas they replace: now,
and as the renderer of ``BASELINE_COMMIT`` (before the SDK was made leaner)
rendered them, with where the bytes go in each.
Then, for discovery, the prompt bytes of catalogs of 50, 100 and 300 tools
(``tests/golden/discovery``: the realistic tools and two npm MCP servers' schemas,
repeated under server prefixes) next to the full SDK for the same tools.
Last, what checking a program before it runs costs (``check_programs``): a 30-line
program against the 20-tool SDK through Code Mode's checker (``ty server``, kept
running: its start-up once, then the median and 90th percentile per program), the same
against 300 tools, and, side by side, a checker started per program (``ty check``,
``pyrefly check``, where installed) and mypy's API in this process (warm cache).

    python bench/sdk.py [--tools 1000] [--rounds 7] [--check-rounds 50]

The baseline is rendered live: ``sdk_python.py`` at ``BASELINE_COMMIT`` is a
standard-library module, so ``git show`` loads it as it was. Outside a git
checkout the figures recorded from it (``BASELINE_RECORDED``) are printed instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsh_jupyter.codemode.sdk_python import (  # noqa: E402
    SdkTool,
    python_sdk_instructions,
    render_python_sdk,
)
from dsh_jupyter.mcp.adapt import UNVALIDATED_NOTE  # noqa: E402
from dsh_jupyter.registry.schema_checkable import checkable_schema  # noqa: E402

TOOL_SET = ROOT / "tests" / "golden" / "sdk" / "realistic.tools.json"
DISCOVERY_CATALOG = ROOT / "tests" / "golden" / "discovery"
BASELINE_COMMIT = "1d66968f7d5d877f6773f0ec995da64345ed5967"
BASELINE_RECORDED = {"section": 14_528, "instructions": 1_348, "output types": 3_418}

Render = Callable[[Iterable[SdkTool]], str]


def realistic_tools() -> list[SdkTool]:
    return [SdkTool(**tool) for tool in json.loads(TOOL_SET.read_text(encoding="utf-8"))]


def many_tools(count: int) -> list[SdkTool]:
    base = realistic_tools()
    return [
        SdkTool(
            name=f"{tool.name}_{i}",
            description=tool.description,
            parameters=tool.parameters,
            output=tool.output,
        )
        for i in range(count)
        for tool in [base[i % len(base)]]
    ]


def baseline_renderer() -> tuple[Callable[[], str], Render] | None:
    """``(instructions, render)`` of the SDK module at ``BASELINE_COMMIT``, or ``None``."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:dsh_jupyter/registry/sdk_python.py"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    module = types.ModuleType("sdk_python_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{BASELINE_COMMIT[:7]}:sdk_python.py", "exec"), module.__dict__)
    return module.python_sdk_instructions, module.render_python_sdk


def categories(module: str) -> Counter[str]:
    """Bytes of an SDK module by what they carry, read line by line from the rendering. A
    type block counts as output when its name says ``Output`` before it says ``Args``."""
    found: Counter[str] = Counter()
    for block in re.split(r"(?<=\n)(?=\S)", module):
        declared = re.search(r"^(?:class (\w+)|(\w+) = TypedDict|(\w+): TypeAlias)", block, re.M)
        name = next((group for group in declared.groups() if group), "") if declared else ""
        part = "output" if re.match(r"\w*?Output", name) and not re.match(r"\w*?Args", name) \
            else "args"
        for line in block.splitlines(keepends=True):
            size, stripped = len(line.encode()), line.strip()
            if not stripped:
                found["layout (blank lines)"] += size
            elif line.startswith("from typing"):
                found["imports"] += size
            elif name in ("ToolCallError", "Tools") or block.startswith("tools: Tools"):
                found[_tools_category(name, stripped)] += size
            elif stripped.startswith("#"):
                found[f"{part} types: field notes"] += size  # a comment line of its own
            elif line.startswith(("class ", '    """', '    r"""')) or " = TypedDict(" in line:
                found[f"{part} types: class lines, docstrings"] += size
            elif "TypeAlias = " in line:
                found[f"{part} types: aliases"] += size
            else:
                code, hash_, note = line.partition("  # ")
                found[f"{part} types: fields"] += len(code.encode()) + (1 if hash_ else 0)
                found[f"{part} types: field notes"] += len((hash_ + note).encode()) - (
                    1 if hash_ else 0)
    return found


def _tools_category(name: str, line: str) -> str:
    if name != "Tools":
        return "ToolCallError, tools: Tools"
    if line.startswith(("async def ", "# tools[")):
        return "Tools: signatures"
    if "__getitem__" in line or line.startswith(('"""`tools', "class Tools")):
        return "Tools: class line, __getitem__"
    return "Tools: tool descriptions (docstrings)"


def sdk_figures(instructions: Callable[[], str], render: Render,
                tools: list[SdkTool]) -> dict[str, int]:
    module = render(tools)
    text = instructions()
    found = categories(module)
    return {
        "section": len(f"{text}\n\n{module}".encode()),
        "instructions": len(text.encode()),
        "output types": sum(size for key, size in found.items() if key.startswith("output")),
        **{f"  {name}": size for name, size in sorted(found.items())},
    }


def main(count: int, rounds: int) -> None:
    tools = many_tools(count)
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        module = render_python_sdk(tools)
        timings.append(time.perf_counter() - start)
    median = statistics.median(timings)
    print(f"render {count} tools: {median * 1e3:.1f} ms median of {rounds}", end="")
    print(f" ({median / count * 1e6:.0f} µs/tool, {len(module.encode()):,} bytes)")

    realistic = realistic_tools()
    native = len(json.dumps([{"name": t.name, "description": t.description,
                              "parameters": t.parameters} for t in realistic]).encode())
    with_outputs = len(json.dumps([{"name": t.name, "description": t.description,
                                    "parameters": t.parameters, "outputSchema": t.output}
                                   for t in realistic]).encode())
    after = sdk_figures(python_sdk_instructions, render_python_sdk, realistic)
    baseline = baseline_renderer()
    before = (sdk_figures(*baseline, realistic) if baseline is not None
              else BASELINE_RECORDED)
    source = "rendered" if baseline is not None else "recorded"
    print(f"{len(realistic)} realistic tools, SDK section (instructions + module) in bytes:")
    print(f"  {'':38} {'before':>8} {'after':>8}   before = {BASELINE_COMMIT[:7]}, {source}")
    for key in after | before:
        print(f"  {key:38} {before.get(key, 0):>8,} {after.get(key, 0):>8,}")
    print(f"  native schemas {native:,} bytes (json.dumps of name/description/parameters); "
          f"with MCP's outputSchema {with_outputs:,}")
    print(f"  ratio SDK/native: before {before['section'] / native:.2f}, "
          f"after {after['section'] / native:.2f}; "
          f"without output types {(after['section'] - after['output types']) / native:.2f}; "
          f"against native with outputSchema {after['section'] / with_outputs:.2f}")
    unvalidated = [t.name for t in realistic if checkable_schema(t.parameters) is None]
    note = len(f"\n\n{UNVALIDATED_NOTE}".encode())
    print(f"  served over MCP, {len(unvalidated)} of these tools have nothing the validated "
          f"subset can check and their descriptions gain the unvalidated note: {note} bytes each, "
          f"{note * len(unvalidated):,} in native and SDK alike (not counted above)")


def discovery(sizes: tuple[int, ...] = (50, 100, 300)) -> None:
    """Prompt bytes under discovery (system text + the run_code wire schema) against the
    full SDK's (instructions + module + run_code) for the same catalog."""
    sys.path.insert(0, str(DISCOVERY_CATALOG))
    from discovery_support import large_catalog

    from dsh_jupyter.codemode.discovery import DISCOVERY_RULE, Catalog, discovery_instructions
    from dsh_jupyter.codemode.prompt import CODE_ONLY_RULE, run_code_schema

    wire = len(json.dumps([run_code_schema()]).encode())
    print("discovery prompt (rule + instructions + index + run_code schema):")
    for size in sizes:
        tools = large_catalog(size)
        catalog = Catalog(tools)
        start = time.perf_counter()
        index = catalog.index()
        built = time.perf_counter() - start
        prompt = len(f"{DISCOVERY_RULE}\n\n{discovery_instructions()}\n\n{index}".encode())
        full = len(f"{CODE_ONLY_RULE}\n\n{python_sdk_instructions()}\n\n```python\n"
                   f"{render_python_sdk(tools)}```".encode())
        print(f"  {size:>3} tools {prompt + wire:>6,} bytes (index {len(index.encode()):,}, "
              f"{built * 1e3:.1f} ms); full SDK {full + wire:>8,} bytes")


# A 30-line program as a model writes one: reads, a search, a gather, a loop, a dict built in
# a variable, dynamic access, json, error handling and a return.
CHECKED_PROGRAM = """\
import json
page = await tools.read_file({"path": "README.md", "limit": 50})
lines = [line["text"] for line in page["lines"]]
print(len(lines), page["total_lines"])
found = await tools.grep({"pattern": "def ", "context_lines": 1})
for group in found["files"]:
    print(group["path"], [m["line"] for m in group["matches"]])
status = await tools.git_status({})
changed = [f["path"] for f in status["files"]]
log = await tools.git_log({"max_count": 3})
shas = [entry["sha"] for entry in log]
diff = await tools.git_diff({})
print(diff[:100])
paths, listing = await asyncio.gather(
    tools.glob({"pattern": "*.py"}),
    tools.list_dir({"path": "."}),
)
print(paths["total"], len(listing["entries"]))
args = {"key": "seen"}
value = await getattr(tools, "kv_get")(args)
print(value["value"])
try:
    await tools.bash({"command": "ls"})
except ToolCallError as err:
    print(err.tool_name, err.message)
data = json.loads(json.dumps({"a": changed, "b": shas}))
summary = {"lines": len(lines), "changed": changed, "data": data}
await tools.kv_set({"key": "summary", "value": summary})
print(summary)
return summary
"""


def check_cost(rounds: int) -> None:
    """What a check costs a run (see the module docstring)."""
    from dsh_jupyter.codemode.check import check_document, check_sdk
    from dsh_jupyter.codemode.ty_server import find_ty, prepare_workspace

    executable = find_ty()
    if executable is None:
        print("check before run: ty is not installed (pip install 'dsh-jupyter[check]')")
        return
    assert CHECKED_PROGRAM.count("\n") == 30
    print(f"check before run, a {CHECKED_PROGRAM.count(chr(10))}-line program "
          f"(ty server, kept running):")
    for tools in (realistic_tools(), many_tools(300)):
        start, times = asyncio.run(_checker_times(tools, rounds))
        print(f"  {len(tools):>4} tools: start-up (first check) {start * 1e3:6.1f} ms, then "
              f"p50 {_quantile(times, 0.5) * 1e3:5.1f} ms, p90 "
              f"{_quantile(times, 0.9) * 1e3:5.1f} ms of {rounds}")
    sdk = check_sdk(realistic_tools(), discovery=False)
    document = check_document(CHECKED_PROGRAM, "sdk")
    print("  side by side, 20 tools, medians: a process per program, or mypy in this one:")
    with tempfile.TemporaryDirectory(prefix="dsh-bench-check-") as directory:
        folder = Path(directory)
        prepare_workspace(folder)  # the server's rules and empty environment
        (folder / "sdk.py").write_text(sdk, encoding="utf-8")
        (folder / "program.py").write_text(document, encoding="utf-8")
        pyrefly = Path(sys.executable).with_name("pyrefly")
        commands = {
            "ty check": [executable, "check", "program.py"],
            "pyrefly check": [os.fspath(pyrefly) if pyrefly.exists()
                              else shutil.which("pyrefly") or "", "check", "program.py"]}
        for name, command in commands.items():
            if not command[0]:
                print(f"    {name:24} not installed")
                continue
            times = _process_times(command, folder, max(3, rounds // 5))
            print(f"    {name:24} {statistics.median(times) * 1e3:6.1f} ms")
        first, warm = _mypy_times(folder)
        print(f"    {'mypy api, in-process':24} {warm * 1e3:6.1f} ms with its cache warm (the "
              f"first: {first * 1e3:.0f} ms), holding this process's GIL while it checks")


async def _checker_times(tools: list[SdkTool], rounds: int) -> tuple[float, list[float]]:
    """The first check (the server starts) and each later one, through Code Mode's checker
    on a registry of stand-ins for ``tools``."""
    from dsh_jupyter import ToolRegistry, default_render, define_tool
    from dsh_jupyter.codemode.checker import ProgramChecker
    from dsh_jupyter.kernel import InProcessRuntime

    registry = ToolRegistry(mode="code", code_runtime=InProcessRuntime())
    for tool in tools:
        registry.register(define_tool(
            name=tool.name, description=tool.description, parameters=tool.parameters,
            output={"schema": tool.output, "render": default_render},
            allow_unsupported_schema=True, execute=lambda args, ctx: None))
    program = CHECKED_PROGRAM
    if len(tools) != 20:  # many_tools names them read_file_0, grep_5, ...
        names = {tool.name.rsplit("_", 1)[0]: tool.name for tool in reversed(tools)}
        program = re.sub(r"tools\.(\w+)\(", lambda m: f"tools.{names[m[1]]}(", program)
    checker = ProgramChecker(registry)
    times = []
    try:
        for _ in range(rounds + 1):
            start = time.perf_counter()
            check = await checker.check(program, None, discovery=False, stateful=False)
            times.append(time.perf_counter() - start)
            assert not check.problems, check.problems
    finally:
        await checker.aclose()
    return times[0], times[1:]


def _process_times(command: list[str], cwd: Path, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, capture_output=True, timeout=120,
                       env={**os.environ, "NO_COLOR": "1"})
        times.append(time.perf_counter() - start)
    return times


def _mypy_times(folder: Path) -> tuple[float, float]:
    from mypy import api

    # --check-untyped-defs: the program's wrapper, `async def __program():`, has no annotations.
    arguments = ["--config-file=", "--ignore-missing-imports", "--check-untyped-defs",
                 "--no-error-summary", "--cache-dir", str(folder / ".mypy_cache"),
                 str(folder / "program.py")]
    program = (folder / "program.py").read_text(encoding="utf-8")
    times = []
    for n in range(6):  # a new program each time, as in use: its cache entry is stale
        (folder / "program.py").write_text(f"{program}# {n}\n", encoding="utf-8")
        start = time.perf_counter()
        api.run(arguments)
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:])  # the first fills the cache


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--check-rounds", type=int, default=50)
    options = parser.parse_args()
    main(options.tools, options.rounds)
    discovery()
    check_cost(options.check_rounds)
