"""A third-party MCP client against ``dsh-jupyter serve-mcp``: the MCP Inspector's CLI
(``@modelcontextprotocol/inspector-cli`` from npm, TypeScript SDK) lists the tools and
calls one, over stdio and over streamable HTTP with a bearer token. Needs Node (skipped
without it unless ``DSH_REQUIRE_NODE=1``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to this tests/mcp folder

from npm_support import npm_bin
from serve_support import HERE, LOG_ENV, http_serve

pytestmark = pytest.mark.timeout(300)
INSPECTOR = ("@modelcontextprotocol/inspector-cli", "1.0.3", "mcp-inspector-cli")


def inspect(*arguments: str) -> Any:
    """Run the inspector CLI; its JSON answer (it prints a deprecation banner first)."""
    binary = npm_bin(*INSPECTOR)
    # 1.0.3 finds its own package.json only relative to the working directory: run it
    # from its build directory, where "../package.json" is its own.
    done = subprocess.run([str(binary), "--cli", *arguments], capture_output=True, text=True,
                          timeout=120, cwd=binary.resolve().parent, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{"):])


def stdio_target(log: Path) -> list[str]:
    return ["-e", f"PYTHONPATH={HERE}", "-e", f"{LOG_ENV}={log}", sys.executable, "-m",
            "dsh_jupyter.cli", "serve-mcp", "--tools", "serve_support:served_registry"]


def test_inspector_lists_and_calls_over_stdio(tmp_path: Path) -> None:
    target = stdio_target(tmp_path / "facts")
    listed = inspect(*target, "--method", "tools/list")
    called = inspect(*target, "--method", "tools/call", "--tool-name", "add",
                     "--tool-arg", "a=2", "b=3")
    denied = inspect(*target, "--method", "tools/call", "--tool-name", "read_secret")
    names = [tool["name"] for tool in listed["tools"]]
    assert names == ["add", "broken", "delete_file", "forecast", "picture",
                     "read_secret", "sleepy", "slow"]
    forecast = next(tool for tool in listed["tools"] if tool["name"] == "forecast")
    assert forecast["outputSchema"]["type"] == "object"
    assert called["content"] == [{"type": "text", "text": "5"}]
    assert denied["isError"] is True
    assert denied["content"] == [{"type": "text", "text": "Error: secrets stay secret"}]


def test_inspector_calls_run_code_over_http_with_a_token(tmp_path: Path) -> None:
    with http_serve(tmp_path / "facts", "--http", "0.0.0.0:0", "--mode", "code") as server:
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        auth = f"Authorization: Bearer {server.token}"
        listed = inspect(url, "--transport", "http", "--header", auth, "--method", "tools/list")
        called = inspect(url, "--transport", "http", "--header", auth, "--method", "tools/call",
                         "--tool-name", "run_code", "--tool-arg", "description=sum",
                         "code=return await tools.add({'a': 40, 'b': 2})")
        binary = npm_bin(*INSPECTOR)
        refused = subprocess.run([str(binary), "--cli", url, "--transport", "http",
                                  "--method", "tools/list"], capture_output=True, text=True,
                                 timeout=120, cwd=binary.resolve().parent, check=False)
    assert [tool["name"] for tool in listed["tools"]] == ["run_code"]
    assert "class Tools" in listed["tools"][0]["description"]
    assert called["structuredContent"] == {"logs": [], "result": 42}
    assert refused.returncode != 0  # no token: our 401 body is what it reports
    assert "unauthorized: send Authorization: Bearer <token>" in refused.stderr
