"""Helpers shared by the MCP tests (plain functions; the fixtures live in conftest).

:func:`everything` runs ``@modelcontextprotocol/server-everything`` from npm, a server
nobody here wrote. Its launcher takes the transport as its first argument (``stdio``,
``streamableHttp``); over HTTP it serves ``/mcp`` on the port in ``PORT`` and says so on
stderr once listening. :func:`filesystem_server` and :func:`git_server` are the commands of
two more reference servers: ``@modelcontextprotocol/server-filesystem`` from npm (the
directories it may touch are its arguments) and PyPI's ``mcp-server-git`` (in the ``test``
extra), run by this interpreter on a repository :func:`git_repository` makes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from npm_support import npm_bin

from dsh_jupyter import ToolCall, ToolRegistry, ToolResult

SERVER = Path(__file__).with_name("server.py")


async def call(registry: ToolRegistry, name: str, arguments: dict[str, Any] | None = None,
               **options: Any) -> ToolResult:
    return await registry.execute(ToolCall(call_id=f"call-{name}", name=name,
                                           arguments=arguments or {}, **options))


async def eventually(predicate: Callable[[], Awaitable[object] | object], *,
                     seconds: float = 15.0) -> None:
    """Poll ``predicate`` (sync or async) until it is true; fail after ``seconds``.

    Polling, not an event: the state lives in another process or arrives by notification.
    """
    async with asyncio.timeout(seconds):
        while True:
            outcome = predicate()
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome:
                return
            await asyncio.sleep(0.02)


async def server_saw(registry: ToolRegistry, event: str) -> bool:
    """Whether the test server recorded ``event`` (asked through its ``stats`` tool)."""
    result = await call(registry, "stats")
    assert not result.is_error, result
    assert isinstance(result.value, dict)
    return event in result.value["events"]  # type: ignore[operator]


def pids_running(marker: str) -> list[int]:
    """Live processes with ``marker`` as one of their arguments (zombies have none)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and b"--http" not in argv:
            pids.append(int(cmdline.parent.name))
    return pids


def stdio_server_pids() -> list[int]:
    """Live processes running the stdio test server."""
    return pids_running(str(SERVER))


def other_tasks() -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


EVERYTHING = ("@modelcontextprotocol/server-everything", "2026.8.31", "mcp-server-everything")
_STARTUP_SECONDS = 60.0


def everything_bin() -> Path:
    return npm_bin(*EVERYTHING)


@contextmanager
def everything(transport: str, log: Path) -> Iterator[dict[str, Any]]:
    """``connect_mcp`` keyword arguments for the server over ``transport``."""
    binary = everything_bin()
    if transport == "stdio":
        yield {"stdio": [str(binary), "stdio"]}
        return
    with socket.socket() as probe:  # a free port; the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w+") as errors:
        process = subprocess.Popen([str(binary), "streamableHttp"], stdout=subprocess.DEVNULL,
                                   stderr=errors, env={**os.environ, "PORT": str(port)})
        try:
            deadline = time.monotonic() + _STARTUP_SECONDS
            while f"listening on port {port}" not in log.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server-everything did not start: {log.read_text()}")
                time.sleep(0.05)
            yield {"url": f"http://127.0.0.1:{port}/mcp"}
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


FILESYSTEM = ("@modelcontextprotocol/server-filesystem", "2026.8.31", "mcp-server-filesystem")


def filesystem_server(*directories: Path) -> list[str]:
    """The stdio command of the filesystem server, allowed into ``directories``."""
    return [str(npm_bin(*FILESYSTEM)), *map(str, directories)]


def git_server(repository: Path) -> list[str]:
    """The stdio command of ``mcp-server-git``, confined to ``repository``."""
    return [sys.executable, "-m", "mcp_server_git", "--repository", str(repository)]


def git_repository(path: Path) -> Path:
    """A new repository at ``path``: one commit ("first commit", adding notes.txt), then an
    untracked new.txt."""
    path.mkdir(parents=True, exist_ok=True)

    def git(*arguments: str) -> None:
        subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
                        "-c", "init.defaultBranch=main", *arguments],
                       cwd=path, check=True, capture_output=True, timeout=30)

    git("init", "-q")
    (path / "notes.txt").write_text("one\n")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "first commit")
    (path / "new.txt").write_text("two\n")
    return path
