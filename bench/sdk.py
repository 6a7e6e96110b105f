"""Cost of the Python SDK: render time, and prompt bytes against native schemas.

Prints the median time to render the SDK for 1,000 tools (the 20 realistic
tools of ``tests/golden/sdk/realistic.tools.json``, renamed and repeated), and
for the 20 realistic tools the bytes of the Code Mode SDK section (instructions
+ module) next to the bytes of the native function schemas they replace.
Then, for discovery, the prompt bytes of catalogs of 50, 100 and 300 tools
(``tests/golden/discovery``: the realistic tools and two npm MCP servers' schemas,
repeated under server prefixes) next to the full SDK for the same tools.

    python bench/sdk.py [--tools 1000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from dsh_jupyter.registry.sdk_python import SdkTool, python_sdk_instructions, render_python_sdk

TOOL_SET = Path(__file__).resolve().parents[1] / "tests" / "golden" / "sdk" / "realistic.tools.json"
DISCOVERY_CATALOG = Path(__file__).resolve().parents[1] / "tests" / "golden" / "discovery"


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
    section = python_sdk_instructions() + "\n\n" + render_python_sdk(realistic)
    native = json.dumps(
        [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in realistic
        ]
    )
    sdk_bytes, native_bytes = len(section.encode()), len(native.encode())
    instructions = len(python_sdk_instructions().encode())
    print(f"{len(realistic)} realistic tools:")
    print(f"  SDK section    {sdk_bytes:>7,} bytes (instructions {instructions:,} + module)")
    print(f"  native schemas {native_bytes:>7,} bytes (json.dumps of name/description/parameters)")
    untyped = [
        SdkTool(name=t.name, description=t.description, parameters=t.parameters, output={})
        for t in realistic
    ]
    outputs = len(render_python_sdk(realistic).encode()) - len(render_python_sdk(untyped).encode())
    print(f"  of which output types {outputs:,} bytes (native schemas carry none)")
    print(f"  ratio SDK/native {sdk_bytes / native_bytes:.2f}")


def discovery(sizes: tuple[int, ...] = (50, 100, 300)) -> None:
    """Prompt bytes under discovery (system text + the run_code wire schema) against the
    full SDK's (instructions + module + run_code) for the same catalog."""
    sys.path.insert(0, str(DISCOVERY_CATALOG))
    from discovery_support import large_catalog

    from dsh_jupyter.registry.discovery import DISCOVERY_RULE, Catalog, discovery_instructions
    from dsh_jupyter.registry.prompt import CODE_ONLY_RULE, run_code_schema

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
