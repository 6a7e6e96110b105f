"""Discovery on both runtimes (the in-process one and a real kernel): a program searches,
describes and calls a tool, and misused helpers fail inside the program. What needs no
kernel (the index, search, describe, policy and modes) is in
tests/unit/codemode/test_discovery.py.

The large catalog is tests/golden/discovery/discovery_support.py.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from code_mode_support import registry_of, run

from dsh_jupyter.kernel import InProcessRuntime, KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.runtime import CodeRuntime

sys.path.insert(0, str(Path(__file__).parents[1] / "golden" / "discovery"))
from discovery_support import large_catalog

# --- programs --------------------------------------------------------------------------

@pytest.fixture(params=["in-process", pytest.param("kernel", marks=pytest.mark.kernel)])
async def code_runtime(request: pytest.FixtureRequest) -> AsyncIterator[CodeRuntime]:
    if request.param == "in-process":
        yield InProcessRuntime()
        return
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        yield runtime


PROGRAM = '''
hits = await tools.search("list directory sizes", limit=3)
name = hits[0]["name"]
signature = await tools.describe(name)
print(name)
print(signature.splitlines()[0])
return await tools[name]({"path": "/data", "sortBy": "size"})
'''


@pytest.mark.timeout(90)
async def test_a_program_searches_describes_and_calls(code_runtime: CodeRuntime) -> None:
    registry = registry_of(large_catalog(300), code_runtime)
    events: list[str] = []
    registry.on_event(lambda e: events.append(f"{e['kind']} {e.get('name')}"))
    result = await run(registry, PROGRAM)
    assert not result.is_error, result.text
    assert result.value == {
        "logs": ["fs_list_directory_with_sizes", "class FsListDirectoryWithSizesArgs(TypedDict):"],
        "result": {"tool": "fs_list_directory_with_sizes",
                   "args": {"path": "/data", "sortBy": "size"}}}
    # The helpers are no calls: only the tool call went through the pipeline.
    dispatched = [e for e in events if e.startswith("tool/code-dispatch ")]
    assert dispatched == ["tool/code-dispatch fs_list_directory_with_sizes"]


@pytest.mark.timeout(90)
async def test_helper_misuse_and_unknown_names_fail_inside_the_program(
        code_runtime: CodeRuntime) -> None:
    registry = registry_of(large_catalog(50), code_runtime)
    result = await run(registry, '''
out = []
try:
    await tools.describe("fs_nope")
except ToolCallError as error:
    out.append(error.message)
try:
    await tools.search(3)
except ToolCallError as error:
    out.append(error.message)
try:
    await tools.search("a", 2, 3)
except TypeError as error:
    out.append(str(error))
return out
''')
    assert result.value["result"] == [
        "no tool named 'fs_nope' in this run; similar: fs_read_file, fs_edit_file, "
        "fs_write_file (tools.search finds tools by words)",
        "tools.search(query, limit=10): query must be a string",
        "tools.search(query, limit) takes at most 2 arguments"]
