"""A client's cancel stops a served call, even one whose tool never looks at its signal.

``sleepy`` (serve_support) is a plain ``async def`` that sleeps 30 s and records its start,
its cancellation and its finish. The official MCP client cancels by cancelling its
``call_tool`` await: it sends ``notifications/cancelled`` (stdio, and handshake-era HTTP) or
closes the request's stream (2026-era HTTP). The server aborts the call's signal and then
cancels the call's task (the registry's cancellation contract), so the body stops at once,
whether it was called directly or as a sub-call of a ``run_code`` program; and a server
stopped right after such a cancel exits promptly, without a traceback.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp import Client
from mcp.types import TextContent
from mcp_support import eventually, pids_running
from serve_support import HttpServe, http_client, served_client, served_facts

pytestmark = pytest.mark.timeout(180)
CANCELLED_WITHIN = 2.0  # seconds from the client's cancel to the body's CancelledError
ERAS = ["legacy", "auto"]


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def cancel_when(client: Client, facts: Path, fact: str, name: str,
                      arguments: dict[str, Any], *, seconds: float = 15.0) -> float:
    """Call ``name``, cancel the call once ``fact`` is recorded; the time of the cancel."""
    call = asyncio.create_task(client.call_tool(name, arguments))
    await eventually(lambda: fact in served_facts(facts), seconds=seconds)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    return time.monotonic()


async def cancelled_in(facts: Path, tag: str, since: float) -> float:
    """Seconds from ``since`` until the body of call ``tag`` recorded its cancellation."""
    try:
        await eventually(lambda: f"cancelled {tag}" in served_facts(facts), seconds=10)
    except TimeoutError:
        pytest.fail(f"the body of {tag!r} still ran 10 s after the cancel: "
                    f"{served_facts(facts)}")
    return time.monotonic() - since


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_cancel_stops_a_tool_that_ignores_its_signal(
        tmp_path: Path, transport: str, era: str) -> None:
    facts = tmp_path / "facts"
    async with served_client(transport, facts, mode=era) as client:
        cancelled_at = await cancel_when(client, facts, "start one", "sleepy", {"tag": "one"})
        took = await cancelled_in(facts, "one", cancelled_at)
        after = await client.call_tool("add", {"a": 1, "b": 1})  # the server carries on
    assert took < CANCELLED_WITHIN, f"the body ran {took:.1f} s after the cancel"
    assert served_facts(facts) == ["start one", "cancelled one"]  # never "finish one"
    assert text(after) == "2"


@pytest.mark.kernel
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_cancelled_program_ends_its_kernel_and_its_sub_call(
        tmp_path: Path, transport: str) -> None:
    facts = tmp_path / "facts"
    marker = f"600.{uuid.uuid4().int % 10**12}"  # a process the program's kernel starts
    program = f"""
import subprocess
subprocess.Popen(["sleep", "{marker}"])
return await tools.sleepy({{"tag": "inner"}})
"""
    async with served_client(transport, facts, "--mode", "both") as client:
        cancelled_at = await cancel_when(client, facts, "start inner", "run_code",
                                         {"description": "sleep", "code": program}, seconds=60)
        took = await cancelled_in(facts, "inner", cancelled_at)
        await eventually(lambda: not pids_running(marker), seconds=10)
        after = await client.call_tool("add", {"a": 2, "b": 2})
    assert took < CANCELLED_WITHIN, f"the sub-call ran {took:.1f} s after the cancel"
    assert served_facts(facts) == ["start inner", "cancelled inner"]
    assert text(after) == "4"


@pytest.mark.parametrize("attempt", range(3))  # the traceback came in 2 of 6 tries
@pytest.mark.parametrize("era", ERAS)
async def test_sigterm_right_after_a_cancelled_http_call_exits_promptly_and_quietly(
        tmp_path: Path, era: str, attempt: int) -> None:
    facts = tmp_path / "facts"
    server = HttpServe(facts, "--http", "127.0.0.1:0")
    try:
        async with http_client(server.url, mode=era) as client:
            await cancel_when(client, facts, "start one", "sleepy", {"tag": "one"})
            server.process.terminate()
            stopping = time.monotonic()
            await eventually(lambda: server.process.poll() is not None, seconds=30)
            took = time.monotonic() - stopping
    finally:
        returncode = server.stop()
    assert "Traceback" not in server.stderr and "ERROR" not in server.stderr, server.stderr
    assert took < 3.0, f"serve-mcp took {took:.1f} s to stop"
    assert returncode == 0
    assert "finish one" not in served_facts(facts)
