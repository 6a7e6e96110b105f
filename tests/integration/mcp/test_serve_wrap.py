"""``dsh-jupyter serve-mcp --wrap -- CMD`` (and ``--wrap-url``): three reference MCP servers
nobody here wrote (npm's server-everything and server-filesystem, PyPI's mcp-server-git)
served again in Code Mode, driven by the official MCP client. Programs on a real kernel call
the wrapped tools; a ``--policy`` file denies and asks (by elicitation) inside a program."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp import Client, stdio_client
from mcp.types import TextContent
from mcp_support import everything_bin, filesystem_server, git_repository, git_server
from serve_support import Answers, command_params, serve_mcp_command, stdio_params, wrap_params

pytestmark = pytest.mark.timeout(180)


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def run_code(client: Client, code: str) -> Any:
    """The program's value (``{"logs", "result"}``), failing the test on an error."""
    result = await client.call_tool("run_code", {"description": "test program", "code": code})
    assert not result.is_error, text(result)
    return result.structured_content


async def test_everything_in_code_mode_inherits_the_environment() -> None:
    params = wrap_params([str(everything_bin()), "stdio"], env={"DSH_WRAP_MARKER": "seen"})
    async with Client(stdio_client(params)) as client:
        listed = (await client.list_tools()).tools
        value = await run_code(client, """
echoed = await tools.echo({"message": "hi"})
total = await tools["get-sum"]({"a": 2, "b": 3})
import json
env = json.loads(await tools["get-env"]({}))
print(echoed)
return {"sum": total, "marker": env.get("DSH_WRAP_MARKER")}
""")
        direct = await client.call_tool("echo", {"message": "hi"})
    assert [tool.name for tool in listed] == ["run_code"]
    description = listed[0].description or ""
    assert "async def echo(self, args: EchoArgs) -> str:" in description  # the SDK
    assert 'tools["get-sum"](args: GetSumArgs)' in description
    assert "simulate-research-query" not in description  # task-only: not served
    assert value == {"logs": ["Echo: hi"],
                     "result": {"sum": "The sum of 2 and 3 is 5.", "marker": "seen"}}
    assert direct.is_error and "only `run_code` is callable directly" in text(direct)


async def test_filesystem_with_a_policy_that_denies_and_asks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("alpha\n")
    policy = tmp_path / "policy.toml"
    policy.write_text('deny = ["move_file"]\nask = ["write_*", "edit_file"]\n')
    answers = Answers("accept", "decline")
    program = f"""
root = {str(data)!r}
listing = await tools.list_directory({{"path": root}})
alpha = await tools.read_text_file({{"path": root + "/a.txt"}})
await tools.write_file({{"path": root + "/b.txt", "content": "beta"}})
refused = []
try:
    await tools.write_file({{"path": root + "/c.txt", "content": "gamma"}})
except ToolCallError as error:
    refused.append(error.message)
try:
    await tools.move_file({{"source": root + "/a.txt", "destination": root + "/d.txt"}})
except ToolCallError as error:
    refused.append(error.message)
return {{"listing": listing["content"], "alpha": alpha["content"], "refused": refused}}
"""
    params = wrap_params(filesystem_server(data), "--policy", str(policy))
    async with Client(stdio_client(params), elicitation_callback=answers) as client:
        value = await run_code(client, program)
    assert value["result"]["listing"] == "[FILE] a.txt"
    assert value["result"]["alpha"] == "alpha\n"
    assert value["result"]["refused"] == [
        "the policy asks before write_file (ask 'write_*') (rejected by user: "
        "declined in the MCP client)",
        "move_file is denied by the policy (deny 'move_file')"]

    def question(name: str, content: str) -> str:
        arguments = json.dumps({"path": str(data / name), "content": content})
        return (f"Allow the tool call write_file({arguments})?\n"
                "the policy asks before write_file (ask 'write_*')")

    assert answers.questions == [question("b.txt", "beta"), question("c.txt", "gamma")]
    assert sorted(path.name for path in data.iterdir()) == ["a.txt", "b.txt"]
    assert (data / "b.txt").read_text() == "beta"


async def test_git_in_discovery_mode(tmp_path: Path) -> None:
    repository = git_repository(tmp_path / "repo")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"deny": ["git_reset", "git_commit"]}))
    program = f"""
repo = {str(repository)!r}
found = [hit["name"] for hit in await tools.search("commit history log")]
log = await tools.git_log({{"repo_path": repo, "max_count": 5}})
status = await tools.git_status({{"repo_path": repo}})
try:
    await tools.git_commit({{"repo_path": repo, "message": "sneaky"}})
except ToolCallError as error:
    denied = error.message
return {{"found": found, "log": log, "status": status, "denied": denied}}
"""
    params = wrap_params(git_server(repository), "--mode", "discovery", "--policy", str(policy))
    async with Client(stdio_client(params)) as client:
        listed = (await client.list_tools()).tools
        value = (await run_code(client, program))["result"]
    assert [tool.name for tool in listed] == ["run_code"]
    assert "tools.search" in (listed[0].description or "")  # the index, not the whole SDK
    assert "git_log" in value["found"]
    assert "first commit" in value["log"]
    assert "new.txt" in value["status"]  # untracked
    assert value["denied"] == "git_commit is denied by the policy (deny 'git_commit')"


async def test_wrap_url_with_a_header_in_both_modes(http_server: Any) -> None:
    params = command_params(serve_mcp_command("--mode", "both", "--wrap-url", http_server.url,
                                              "--wrap-header", "X-Test-Token: s3cret"))
    async with Client(stdio_client(params)) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        direct = await client.call_tool("header", {"name": "X-Test-Token"})
        value = await run_code(client, 'return await tools.header({"name": "X-Test-Token"})')
    assert "greet" in names and names[-1] == "run_code"
    assert text(direct) == "s3cret"
    assert value == {"logs": [], "result": "s3cret"}


async def test_a_policy_applies_to_a_registry_served_with_tools(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('deny = ["add"]\n')
    params = stdio_params(tmp_path / "facts", "--policy", str(policy))
    async with Client(stdio_client(params)) as client:
        denied = await client.call_tool("add", {"a": 1, "b": 2})
        forecast = await client.call_tool("forecast", {"city": "Oslo"})
    assert denied.is_error
    assert text(denied) == "Error: add is denied by the policy (deny 'add')"
    assert forecast.structured_content == {"city": "Oslo", "high_c": 14.5}
