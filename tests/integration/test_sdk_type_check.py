"""The generated SDKs type-check: mypy runs on each golden case's rendering."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sdk_support import _OBJECT_CYCLE, CASES, tool

from dsh_jupyter.codemode.sdk_python import (
    render_python_sdk,
)


def test_generated_sdks_type_check(tmp_path: Path) -> None:
    """One mypy --strict run: every golden case, plus programs that use the SDK."""
    realistic = render_python_sdk(CASES["realistic"])
    typed = render_python_sdk(CASES["typed"])
    files = {f"sdk_{case}.py": render_python_sdk(tools) for case, tools in CASES.items()}
    files["sdk_object_cycle.py"] = render_python_sdk([tool("loop", parameters=_OBJECT_CYCLE)])
    files["use_ok.py"] = realistic + USE_OK
    files["use_bad.py"] = realistic + USE_BAD
    files["use_typed.py"] = typed + USE_TYPED
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    command = [sys.executable, "-m", "mypy", "--strict", "--config-file=", "--python-version=3.11"]
    command += ["--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary", *files]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors: dict[str, set[int]] = {}
    for match in re.finditer(r"^(\w+\.py):(\d+): error:", run.stdout, re.MULTILINE):
        errors.setdefault(match[1], set()).add(int(match[2]))
    def marked(sdk: str, program: str) -> set[int]:
        offset = sdk.count("\n")
        return {offset + i for i, line in enumerate(program.splitlines(), 1) if "  # E" in line}

    assert errors == {"use_bad.py": marked(realistic, USE_BAD),
                      "use_typed.py": marked(typed, USE_TYPED)}, run.stdout + run.stderr


USE_OK = """
import asyncio


async def main() -> None:
    page = await tools.read_file({"path": "a.py", "limit": 10})
    first: str = page["lines"][0]["text"]
    found = await tools.grep({"pattern": "def ", "context_lines": 1})
    for group in found["files"]:
        print(group["path"], [m["line"] for m in group["matches"]], first)
    diff: str = await tools.git_diff({})
    log = await tools.git_log({"max_count": 3})
    print(diff, log[0]["sha"])
    await tools.edit_file(
        {"path": "a", "edits": [{"kind": "insert", "after_line": 0, "text": "x"}]}
    )
    try:
        await tools.bash({"command": "ls", "env": {"A": "1"}})
    except ToolCallError as err:
        print(err.tool_name, err.message)
    paths, readme = await asyncio.gather(
        tools.glob({"pattern": "*.py"}), tools.read_file({"path": "README.md"})
    )
    print(paths["total"], readme["total_lines"], await tools["web_search"]({"q": 1}))
"""


# Each line marked `# E` must produce a mypy error, and no other line may.
USE_BAD = """
async def main() -> None:
    await tools.read_file({"path": 1})  # E wrong argument type
    await tools.read_file({})  # E missing required key
    await tools.read_file({"path": "a", "nope": 1})  # E unknown key
    page = await tools.read_file({"path": "a"})
    print(page["nope"])  # E unknown output key
    count: int = await tools.git_diff({})  # E the output is a str
    await tools.web_search({"query": "q", "recency": "decade"})  # E not one of the enum
    await tools.edit_file({"path": "a", "edits": [{"kind": "insert", "old_text": "x"}]})  # E
    await tools.no_such_tool({})  # E
"""


# Typed tools: a dict's value type reaches the SDK, nested too.
USE_TYPED = """
async def main() -> None:
    out = await tools.convert({"prices": {"a": 1.5}, "rates": {"eur": {"usd": 1.1}},
                               "points": {"p": {"x": 1}}, "units": {"d": "m"}})
    total: float = out["a"] + 1
    await tools.convert({"prices": {"a": "1"}, "rates": {}, "points": {}})  # E value type
    await tools.convert({"prices": {}, "rates": {"e": {"u": "x"}}, "points": {}})  # E nested
    await tools.convert({"prices": {}, "rates": {}, "points": {"p": {"y": 1}}})  # E no x
    await tools.convert({"prices": {}, "rates": {}, "points": {}, "units": {"d": "h"}})  # E
    name: str = out["a"]  # E a float
    print(total, name)
"""
