"""The dsh-jupyter command line, end to end (real kernels)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_jupyter.cli import main

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "dsh_jupyter.cli"]

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=HERE, capture_output=True, text=True, timeout=110)


def test_demo_prints_events_and_result() -> None:
    done = cli("demo")
    assert done.returncode == 0, done.stderr
    assert "-> cli-1:code:1 list_files" in done.stdout
    assert "<- cli-1:code:5 error" in done.stdout
    assert '"longest": "src/app.py"' in done.stdout


def test_run_json(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text("print(await tools.greet({'name': 'cli'}))\nreturn 42\n")
    done = cli("run", str(program), "--tools", "cli_fixtures.sample_tools:registry", "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["is_error"] is False
    assert body["value"] == {"logs": ["hello, cli"], "result": 42}
    kinds = [event["kind"] for event in body["events"] if event["kind"] != "tool/code-output"]
    assert kinds == ["tool/call", "tool/code-dispatch-start", "tool/code-dispatch-running",
                     "tool/code-dispatch", "tool/result"]
    output = [line for event in body["events"] if event["kind"] == "tool/code-output"
              for line in event["logs"]]
    assert output == ["hello, cli"]


def test_run_failure_exit_code(tmp_path: Path) -> None:
    program = tmp_path / "bad.py"
    program.write_text("raise ValueError('nope')\n")
    done = cli("run", str(program), "--tools", "cli_fixtures.sample_tools:registry", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "CODE_RUN_FAILED"


def test_sdk_command() -> None:
    done = cli("sdk", "--tools", "cli_fixtures.sample_tools:registry")
    assert done.returncode == 0, done.stderr
    assert "async def greet(self, args: GreetArgs) -> str:" in done.stdout


def test_bad_tools_spec_is_explained() -> None:
    done = cli("sdk", "--tools", "no_such_module:x")
    assert done.returncode != 0 and "cannot load" in done.stderr


@pytest.mark.parametrize("command", ["", "demo", "run", "sdk", "serve-mcp", "eval", "export",
                                     "approvals", "approvals list", "approvals approve"])
def test_help_is_plain_text(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--help shows no reStructuredText (``literals``, ::, :roles:) from the docstrings."""
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "usage: dsh-jupyter" in text
    assert "``" not in text and not re.search(r"::$|:[a-z]+:`", text, re.MULTILINE), text
