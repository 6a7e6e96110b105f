"""Helpers shared by the MCP tests (plain functions; the fixtures live in conftest)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

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
