"""A third-party MCP client against ``dsh-jupyter serve-mcp``: the MCP Inspector's CLI
(``@modelcontextprotocol/inspector --cli`` from npm, TypeScript SDK) lists the tools and
calls one, over stdio and over streamable HTTP with a bearer token, and through a wrapped
third-party server (``--wrap -- mcp-server-filesystem``). Needs Node (skipped without it
unless ``DSH_REQUIRE_NODE=1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import filesystem_server
from npm_support import INSPECTOR, npm_bin
from serve_support import HERE, LOG_ENV, http_serve, wrap_command

pytestmark = pytest.mark.timeout(300)


def run_inspector(*arguments: str, catalog: Path) -> subprocess.CompletedProcess[str]:
    """``mcp-inspector --cli ...``, with what it writes (a catalog, a storage folder) kept
    beside ``catalog`` rather than in the real HOME."""
    env = {**os.environ, "MCP_CATALOG_PATH": str(catalog), "HOME": str(catalog.parent)}
    return subprocess.run([str(npm_bin(*INSPECTOR)), "--cli", *arguments], capture_output=True,
                          text=True, timeout=120, cwd=catalog.parent, env=env, check=False)


def inspect(*arguments: str, catalog: Path, exit_code: int = 0) -> Any:
    """Run the inspector CLI; its JSON answer (a tool result with ``isError`` exits 5)."""
    done = run_inspector(*arguments, catalog=catalog)
    assert done.returncode == exit_code, done.stdout + done.stderr
    return json.loads(done.stdout)


def stdio_target(log: Path) -> list[str]:
    return ["-e", f"PYTHONPATH={HERE}", "-e", f"{LOG_ENV}={log}", sys.executable, "-m",
            "dsh_jupyter.cli", "serve-mcp", "--tools", "serve_support:served_registry"]


def test_inspector_lists_and_calls_over_stdio(tmp_path: Path) -> None:
    target, catalog = stdio_target(tmp_path / "facts"), tmp_path / "catalog.json"
    listed = inspect(*target, "--method", "tools/list", catalog=catalog)
    called = inspect(*target, "--method", "tools/call", "--tool-name", "add",
                     "--tool-arg", "a=2", "b=3", catalog=catalog)
    denied = inspect(*target, "--method", "tools/call", "--tool-name", "read_secret",
                     catalog=catalog, exit_code=5)
    names = [tool["name"] for tool in listed["tools"]]
    assert names == ["add", "broken", "delete_file", "forecast", "picture",
                     "read_secret", "sleepy", "slow"]
    forecast = next(tool for tool in listed["tools"] if tool["name"] == "forecast")
    assert forecast["outputSchema"]["type"] == "object"
    assert called["content"] == [{"type": "text", "text": "5"}]
    assert denied["isError"] is True
    assert denied["content"] == [{"type": "text", "text": "Error: secrets stay secret"}]
    assert denied["_meta"]["dsh-jupyter/error"]["code"] == "DENIED"


def test_inspector_calls_run_code_over_http_with_a_token(tmp_path: Path) -> None:
    with http_serve(tmp_path / "facts", "--http", "0.0.0.0:0", "--mode", "code") as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        auth = f"Authorization: Bearer {server.token}"
        catalog = tmp_path / "catalog.json"
        listed = inspect(url, "--transport", "http", "--header", auth, "--method", "tools/list",
                         catalog=catalog)
        called = inspect(url, "--transport", "http", "--header", auth, "--method", "tools/call",
                         "--tool-name", "run_code", "--tool-arg", "description=sum",
                         "code=return await tools.add({'a': 40, 'b': 2})", catalog=catalog)
        refused = run_inspector(url, "--transport", "http", "--method", "tools/list",
                                "--stored-auth-only", catalog=catalog)
    assert [tool["name"] for tool in listed["tools"]] == ["run_code"]
    assert "class Tools" in listed["tools"][0]["description"]
    assert called["structuredContent"] == {"logs": [], "result": 42}
    # No token: our 401 with "WWW-Authenticate: Bearer" makes it ask for OAuth, which a
    # non-interactive run declines.
    assert refused.returncode != 0
    assert json.loads(refused.stderr)["error"]["code"] == "auth_required"


def test_inspector_runs_code_against_a_wrapped_filesystem_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("alpha")
    (data / "b.txt").write_text("beta")
    target, catalog = wrap_command(filesystem_server(data)), tmp_path / "catalog.json"
    listed = inspect(*target, "--method", "tools/list", catalog=catalog)
    code = (f"root = {str(data)!r}; "
            "names = (await tools.list_directory({'path': root}))['content'].split(chr(10)); "
            "texts = [(await tools.read_text_file({'path': root + '/' + n[7:]}))['content'] "
            "for n in names]; "
            "return dict(zip(names, texts))")
    called = inspect(*target, "--method", "tools/call", "--tool-name", "run_code",
                     "--tool-arg", "description=read every file", f"code={code}",
                     catalog=catalog)
    assert [tool["name"] for tool in listed["tools"]] == ["run_code"]
    assert "async def read_text_file(self, args: ReadTextFileArgs)" in (
        listed["tools"][0]["description"])
    assert called["structuredContent"] == {
        "logs": [], "result": {"[FILE] a.txt": "alpha", "[FILE] b.txt": "beta"}}
