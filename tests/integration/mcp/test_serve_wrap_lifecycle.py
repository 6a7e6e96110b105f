"""The wrapped server lives exactly as long as ``serve-mcp --wrap``: started before anything
is served, stopped when the client leaves or a signal stops serving (no orphan process),
and when it goes away first serving stops with an error. Its stderr never reaches the
protocol on stdout. A server that cannot be started is one error line and exit 1.

These drive ``serve-mcp`` with raw JSON-RPC lines (native mode: no kernel needed) so that
the test, not a client library, owns the process: its exit code, its signals, its stdout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp_support import SERVER, filesystem_server, git_server, pids_running
from serve_support import interruptible, serve_mcp_command, wrap_command

pytestmark = pytest.mark.timeout(120)
_PREFIX = "dsh-jupyter serve-mcp: "


class RawServe:
    """``serve-mcp`` as a child process spoken to in JSON-RPC lines (the handshake era)."""

    def __init__(self, command: list[str], stderr: Path) -> None:
        self._stderr_path = stderr
        self._stderr = stderr.open("w")
        self.process = subprocess.Popen(interruptible(command), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE,
                                        stderr=self._stderr, text=True, bufsize=1)
        self.stdout: list[str] = []  # every line the server wrote, in order
        self._ids = iter(range(1, 1000))

    @property
    def stderr(self) -> str:
        return self._stderr_path.read_text()

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        number = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline()
            assert line, f"serve-mcp closed stdout; stderr: {self.stderr}"
            self.stdout.append(line)
            message = json.loads(line)
            if message.get("id") == number:
                return message  # type: ignore[no-any-return]

    def start(self) -> list[str]:
        """The handshake, then the served tool names."""
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "raw", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = self.request("tools/list", {})
        return [tool["name"] for tool in listed["result"]["tools"]]

    def close_stdin_and_wait(self) -> int:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.close()
        return self.wait()

    def wait(self) -> int:
        returncode = self.process.wait(timeout=30)
        stdout = self.process.stdout
        assert stdout is not None
        self.stdout.extend(stdout.readlines())
        return returncode

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self._stderr):
            if stream is not None:
                with suppress(OSError):  # a pipe whose reader is gone
                    stream.close()


@contextmanager
def raw_serve(command: list[str], stderr: Path) -> Iterator[RawServe]:
    serve = RawServe(command, stderr)
    try:
        yield serve
    finally:
        serve.stop()


def wait_until_gone(marker: str, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (pids := pids_running(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A directory for the filesystem server; its path marks that server's processes."""
    path = tmp_path / "data"
    path.mkdir()
    (path / "a.txt").write_text("alpha\n")
    return path


def test_the_server_stops_when_the_client_closes_stdin(tmp_path: Path, data: Path) -> None:
    command = wrap_command(filesystem_server(data), "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        names = serve.start()
        read = serve.request("tools/call", {"name": "read_text_file",
                                            "arguments": {"path": str(data / "a.txt")}})
        assert len(pids_running(str(data))) == 2  # serve-mcp and the wrapped server
        returncode = serve.close_stdin_and_wait()
        left = wait_until_gone(str(data))
        stderr = serve.stderr
    assert "read_text_file" in names and "run_code" not in names
    assert read["result"]["structuredContent"] == {"content": "alpha\n"}
    assert returncode == 0
    assert left == []
    # stdout is the protocol alone; the wrapped server's stderr reaches neither stream
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in serve.stdout)
    assert "Secure MCP Filesystem Server" not in "".join(serve.stdout) + stderr
    assert stderr_lines(stderr) == [
        f"{_PREFIX}wrapping MCP server 'secure-filesystem-server': 14 tools",
        f"{_PREFIX}serving MCP (mode native) on stdio"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_too(tmp_path: Path, data: Path, signum: int) -> None:
    command = wrap_command(filesystem_server(data), "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        serve.start()
        serve.process.send_signal(signum)
        returncode = serve.wait()
        left = wait_until_gone(str(data))
    assert returncode == 0
    assert left == []


def test_a_killed_serve_mcp_leaves_no_server_behind(tmp_path: Path, data: Path) -> None:
    """SIGKILL cannot be caught: the wrapped server sees its stdin end and exits."""
    command = wrap_command(filesystem_server(data), "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        serve.start()
        serve.process.kill()
        serve.wait()
        left = wait_until_gone(str(data))
    assert left == []


def test_a_server_that_dies_stops_serving_with_an_error(tmp_path: Path) -> None:
    command = wrap_command([sys.executable, str(SERVER)], "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        serve.start()
        serve.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                    "params": {"name": "die", "arguments": {}}})
        returncode = serve.wait()
        stderr = serve.stderr
    assert returncode == 1
    assert stderr_lines(stderr)[-2:] == [
        f"{_PREFIX}error: the wrapped MCP server 'test-server' is gone (the server closed the "
        f"connection); its stderr ends with:",
        "    test server: dying on request"]


def test_a_server_killed_while_idle_stops_serving(tmp_path: Path, data: Path) -> None:
    command = wrap_command(filesystem_server(data), "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        serve.start()
        server = [pid for pid in pids_running(str(data)) if pid != serve.process.pid]
        assert len(server) == 1
        subprocess.run(["kill", "-KILL", str(server[0])], check=True)
        returncode = serve.wait()
        stderr = serve.stderr
    assert returncode == 1
    assert (f"{_PREFIX}error: the wrapped MCP server 'secure-filesystem-server' is gone "
            "(the server closed the connection)") in stderr


def run_serve(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)


def test_a_missing_command_is_one_error_line() -> None:
    done = run_serve(*wrap_command(["no-such-mcp-server", "--flag"]))
    assert done.returncode == 1
    assert done.stdout == ""
    assert stderr_lines(done.stderr) == [
        f"{_PREFIX}error: --wrap: could not connect to MCP server 'no-such-mcp-server': "
        "FileNotFoundError: [Errno 2] No such file or directory: 'no-such-mcp-server'"]


def test_a_server_that_exits_at_once_is_quoted(tmp_path: Path) -> None:
    not_a_repository = tmp_path / "plain"
    not_a_repository.mkdir()
    done = run_serve(*wrap_command(git_server(not_a_repository)))
    lines = stderr_lines(done.stderr)
    assert done.returncode == 1
    assert lines[0] == (f"{_PREFIX}error: --wrap: could not connect to MCP server "
                        f"{Path(sys.executable).name!r}: MCPError: Connection closed; its "
                        "stderr ends with:")
    assert lines[1:] == [f"    ERROR:mcp_server_git.server:{not_a_repository} is not a valid "
                         "Git repository"]
    assert wait_until_gone(str(not_a_repository)) == []


def test_an_unreachable_url_is_one_error_line() -> None:
    done = run_serve(*serve_mcp_command("--wrap-url", "http://127.0.0.1:9/mcp"))
    lines = stderr_lines(done.stderr)
    assert done.returncode == 1
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"{_PREFIX}error: --wrap-url: could not connect to MCP server "
                               "'http://127.0.0.1:9/mcp': ")


def test_a_server_that_writes_junk_to_stdout_is_one_log_line(tmp_path: Path) -> None:
    chatty = ("print('hello from a chatty server', flush=True); import runpy, sys; "
              f"sys.argv = [{str(SERVER)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')")
    command = wrap_command([sys.executable, "-c", chatty], "--mode", "native")
    with raw_serve(command, tmp_path / "stderr") as serve:
        names = serve.start()
        returncode = serve.close_stdin_and_wait()
        stderr = serve.stderr
    assert "greet" in names and returncode == 0
    # the SDK logs the stray line with a traceback; here it is one line, the traceback's
    # exception named (ValidationError: 1 validation error for union[JSONRPCRequest, ...])
    assert "Traceback" not in stderr
    logged = [line for line in stderr_lines(stderr) if "mcp.client" in line]
    assert len(logged) == 1 and logged[0].startswith(f"{_PREFIX}mcp.client.")
    assert "(ValidationError: " in logged[0]
