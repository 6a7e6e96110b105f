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

    python bench/sdk.py [--tools 1000] [--rounds 7]

The baseline is rendered live: ``sdk_python.py`` at ``BASELINE_COMMIT`` is a
standard-library module, so ``git show`` loads it as it was. Outside a git
checkout the figures recorded from it (``BASELINE_RECORDED``) are printed instead.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    main(options.tools, options.rounds)
    discovery()
