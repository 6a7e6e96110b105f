"""Discovery, with the in-process runtime (no kernel): the index prompt, tools.search and
tools.describe, and calls through them under policy, masks and per-scope modes.

The large catalog is tests/golden/discovery/discovery_support.py: the realistic 20 tools and the
captured schemas of two npm MCP servers, repeated under server prefixes to 300. A program that
searches, describes and calls runs on both runtimes in tests/kernel/test_discovery_runtimes.py.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from code_mode_support import registry_of, run

from dsh_jupyter import Deny, ToolCall, ToolRegistry, default_render, define_tool
from dsh_jupyter.codemode.discovery import Catalog, helper_bindings
from dsh_jupyter.codemode.sdk_python import SdkTool, python_sdk_parts, render_python_sdk
from dsh_jupyter.errors import CodeModeError, RegistrationError

sys.path.insert(0, str(Path(__file__).parents[2] / "golden" / "discovery"))
from discovery_support import base_tools, large_catalog

GOLDEN_SDK = Path(__file__).parents[2] / "golden" / "sdk"


def prompt_bytes(registry: ToolRegistry, scope: Any = None) -> int:
    prompt = registry.prompt(scope)
    return len(prompt.system_text.encode()) + len(json.dumps(prompt.tools).encode())


# --- the index -----------------------------------------------------------------------

def test_a_300_tool_catalog_is_presented_in_at_most_4_kb() -> None:
    registry = registry_of(large_catalog(300))
    prompt = registry.prompt()
    assert [tool["name"] for tool in prompt.tools] == ["run_code"]
    assert [s.id for s in prompt.sections] == ["tools:code-only", "tools:sdk"]
    index = prompt.section("tools:sdk").text  # type: ignore[union-attr]
    assert "The available tools (300, 18 groups):\n" in index
    assert "\ngithub_ (23)\n" in index and index.endswith("\nother (12)")
    assert prompt_bytes(registry) <= 4096
    # The full SDK it replaces is over 150 KB.
    assert prompt_bytes(registry_of(large_catalog(300), mode="code")) > 30 * 4096


def test_the_index_takes_the_most_detailed_form_that_fits() -> None:
    small = Catalog(base_tools()[:20]).index()
    assert "\n- git_status: " in small and "\nother (12):\n- ask_user: " in small
    medium = Catalog(large_catalog(100)).index()
    assert "(a group lists its tools' names after its prefix)" in medium
    assert "\ngit_ (4): commit, diff, log, status\n" in medium
    large = Catalog(large_catalog(300)).index()
    assert "\nfs_ (14)\n" in large and "read_file" not in large
    for text in (small, medium, large):
        assert len(text.encode()) <= 2048


def test_the_index_is_deterministic_and_changes_only_with_the_catalog() -> None:
    tools = large_catalog(300)
    shuffled = list(tools)
    random.Random(7).shuffle(shuffled)
    first = registry_of(tools).prompt().system_text
    assert registry_of(shuffled).prompt().system_text == first
    registry = registry_of(tools)
    undo = registry.register(define_tool(
        name="jira_close_issue", description="Close an issue.",
        parameters={"type": "object"}, output={"schema": {}, "render": default_render},
        execute=lambda a, c: None))
    assert registry.prompt().system_text != first
    undo()
    assert registry.prompt().system_text == first


# --- search ----------------------------------------------------------------------------

def test_search_ranks_names_and_descriptions_on_a_fixed_catalog() -> None:
    catalog = Catalog(large_catalog(50))
    assert [hit["name"] for hit in catalog.search("read file", limit=6)] == [
        "read_file", "fs_read_file", "github_read_file", "fs_read_multiple_files",
        "fs_read_text_file", "fs_read_media_file"]
    assert catalog.ranked("git commit")[0] == "git_commit"
    assert catalog.ranked("Search the web")[0] == "web_search"
    assert catalog.ranked("directories")[:2] == ["fs_create_directory", "fs_list_directory"]
    assert catalog.search("sum", limit=1) == [
        {"name": "demo_get-sum", "description": "Returns the sum of two numbers"}]
    assert catalog.search("zebra") == [] and catalog.search("") == []


def test_search_ties_break_by_name_and_descriptions_are_one_short_line() -> None:
    twins = [SdkTool(name=name, description="Fetch a page. Then more text.",
                     parameters={}, output={}) for name in ("b_fetch", "a_fetch", "c_fetch")]
    hits = Catalog(twins).search("fetch")
    assert hits == [{"name": n, "description": "Fetch a page."}
                    for n in ("a_fetch", "b_fetch", "c_fetch")]
    long = SdkTool(name="x", description="word " * 100, parameters={}, output={})
    summary = Catalog([long]).search("word")[0]["description"]
    assert len(summary) == 100 and summary.endswith("…")


# --- describe --------------------------------------------------------------------------

@pytest.mark.parametrize("catalog", ["realistic", "large"])
def test_describe_is_that_tools_part_of_the_full_sdk(catalog: str) -> None:
    if catalog == "realistic":
        tools = [SdkTool(**t) for t in json.loads(
            (GOLDEN_SDK / "realistic.tools.json").read_text(encoding="utf-8"))]
    else:
        tools = large_catalog(300)
    full = render_python_sdk(tools)
    parts = python_sdk_parts(tools)
    assert parts.module() == full
    discovery = Catalog(tools)
    for part in parts.tools:
        described = discovery.describe(part.name)
        assert described == part.text()
        assert part.member in full
        if part.blocks:
            assert "\n\n\n".join(part.blocks) in full


def test_the_golden_sdks_are_their_parts_joined() -> None:
    tools = [SdkTool(**t) for t in json.loads(
        (GOLDEN_SDK / "realistic.tools.json").read_text(encoding="utf-8"))]
    golden = (GOLDEN_SDK / "realistic.py.txt").read_text(encoding="utf-8")
    assert python_sdk_parts(tools).module() in golden  # the golden adds the instructions


def test_a_tool_named_like_a_helper_is_described_by_subscript() -> None:
    tools = [SdkTool(name=n, description=f"The {n} tool.", parameters={}, output={})
             for n in ("search", "describe", "tools.search")]
    catalog = Catalog(tools)
    assert catalog.describe("search").startswith('    # tools["search"](args: ')
    assert helper_bindings(t.name for t in tools) == {
        "describe": "tools.describe", "search": "$tools.search"}


# --- programs --------------------------------------------------------------------------

async def test_a_denial_through_discovery_runs_the_pipeline() -> None:
    registry = registry_of(large_catalog(50))
    seen: list[str] = []

    def no_writes(execution: Any, decision: Any) -> Deny | None:
        seen.append(execution.name)
        return Deny("writes are off") if "write" in execution.name else None

    registry.on_pre_execute(no_writes)
    result = await run(registry, '''
[hit] = await tools.search("write file", limit=1)
try:
    await tools[hit["name"]]({"path": "a", "content": "b"})
except ToolCallError as error:
    return [error.tool_name, error.message]
''')
    assert result.value["result"] == ["write_file", "writes are off"]
    assert seen == ["run_code", "write_file"]  # the helper saw no policy


async def test_a_masked_tool_is_invisible_to_search_describe_and_calls() -> None:
    registry = registry_of(large_catalog(50), mode="code")
    agent = registry.scope("agent")
    agent.present_as("discovery")
    agent.restrict(deny=["fs_read_file"])
    assert "fs_read_file" not in registry.prompt(agent).system_text
    result = await run(registry, '''
names = [hit["name"] for hit in await tools.search("read file", limit=50)]
try:
    await tools.describe("fs_read_file")
except ToolCallError as error:
    described = error.message
return ["fs_read_file" in names, "fs_read_text_file" in names, described,
        "fs_read_file" in tools]
''', agent=agent)
    assert result.value["result"] == [
        False, True, "no tool named 'fs_read_file' in this run; similar: fs_read_media_file, "
        "fs_read_multiple_files, fs_read_text_file (tools.search finds tools by words)", False]
    direct = await run(registry, 'return await tools["fs_read_file"]({"path": "x"})',
                       agent=agent)
    assert direct.error is not None and direct.error.code == "CODE_RUN_FAILED"
    assert "KeyError" in direct.text


async def test_present_as_and_mode_choose_discovery_per_scope() -> None:
    registry = registry_of(base_tools()[:20], mode="code")
    finder = registry.scope("finder")
    finder.present_as("discovery")
    child = registry.scope("child", parent=finder)
    typed = registry.scope("typed", parent=finder)
    typed.present_as("code")
    assert registry.mode_for(child) == "discovery" and registry.mode_for(typed) == "code"
    assert "class Tools(Protocol)" in registry.prompt().system_text
    assert "class Tools(Protocol)" not in registry.prompt(child).system_text
    assert "tools.search" in registry.prompt(child).system_text
    assert "class Tools(Protocol)" in registry.prompt(typed).system_text
    # Under discovery, as under code, only run_code is callable directly.
    direct = await registry.execute(ToolCall(call_id="c", name="bash", arguments={},
                                             agent=child))
    assert direct.error is not None and direct.error.code == "UNKNOWN_TOOL"
    # Helpers exist only under discovery.
    coded = await run(registry, "return hasattr(tools, 'search')")
    found = await run(registry, "return hasattr(tools, 'search')", agent=child)
    assert (coded.value["result"], found.value["result"]) == (False, True)
    assert ToolRegistry(mode="discovery").mode == "discovery"
    with pytest.raises(RegistrationError, match="discovery"):
        ToolRegistry(mode="nope")  # type: ignore[arg-type]


def test_discovery_needs_a_python_code_runtime() -> None:
    registry = ToolRegistry(mode="discovery")
    with pytest.raises(CodeModeError, match="needs a code runtime"):
        registry.prompt()
