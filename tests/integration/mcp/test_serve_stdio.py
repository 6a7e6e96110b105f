"""``dsh-jupyter serve-mcp`` over stdio, driven by the official MCP client: the tool list
each mode presents, calls through the pipeline, elicitation for ``Ask``, a denial,
cancellation, and a ``run_code`` program on a real kernel with progress notifications.

Both protocol eras: ``legacy`` (the initialize handshake, where the server asks mid-call)
and ``auto`` (2026-07-28 here, where an approval is an ``InputRequiredResult`` round)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/integration/mcp folder

from mcp import Client, stdio_client
from mcp.types import ImageContent, TextContent
from mcp_support import eventually
from serve_support import (
    HERE,
    PIXEL,
    Answers,
    interruptible,
    serve_command,
    serve_env,
    served_facts,
    stdio_params,
)

from dsh_jupyter.mcp.serve_tools import ERROR_META_KEY

pytestmark = pytest.mark.timeout(120)
ERAS = ["legacy", "auto"]


@asynccontextmanager
async def served(log: Path, *options: str, tools: str = "serve_support:served_registry",
                 **client: Any) -> AsyncIterator[Client]:
    async with Client(stdio_client(stdio_params(log, *options, tools=tools)), **client) as c:
        yield c


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.parametrize("era", ERAS)
async def test_native_tools_values_images_and_failures(tmp_path: Path, era: str) -> None:
    async with served(tmp_path / "facts", mode=era) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        added = await client.call_tool("add", {"a": 2, "b": 3})
        forecast = await client.call_tool("forecast", {"city": "Oslo"})
        picture = await client.call_tool("picture", {})
        invalid = await client.call_tool("add", {"a": "2"})
        denied = await client.call_tool("read_secret", {})
        assert client.instructions is None  # native: tools describe themselves
    assert sorted(listed) == ["add", "broken", "delete_file", "forecast", "picture",
                              "read_secret", "sleepy", "slow"]
    assert listed["add"].input_schema["required"] == ["a", "b"]
    assert listed["forecast"].output_schema is not None
    assert listed["forecast"].output_schema["type"] == "object"
    assert not added.is_error and text(added) == "5"
    if era == "legacy":  # object output schemas only: an integer stays in the content
        assert listed["add"].output_schema is None and added.structured_content is None
    else:  # 2026-07-28: any output schema, any structured value
        assert listed["add"].output_schema == {"type": "integer"}
        assert added.structured_content == 5
    assert forecast.structured_content == {"city": "Oslo", "high_c": 14.5}
    assert text(picture) == "a pixel"
    image = picture.content[1]
    assert isinstance(image, ImageContent)
    assert (image.data, image.mime_type) == (PIXEL, "image/png")

    assert invalid.is_error and text(invalid).startswith("Error: invalid arguments for add")
    assert invalid.meta is not None and invalid.meta[ERROR_META_KEY]["code"] == "INVALID_ARGS"
    assert denied.is_error and text(denied) == "Error: secrets stay secret"
    assert denied.meta is not None and denied.meta[ERROR_META_KEY]["code"] == "DENIED"


@pytest.mark.parametrize("era", ERAS)
async def test_an_ask_is_an_elicitation_approved_or_declined(tmp_path: Path, era: str) -> None:
    facts = tmp_path / "facts"
    answers = Answers("accept", "decline")
    async with served(facts, mode=era, elicitation_callback=answers) as client:
        approved = await client.call_tool("delete_file", {"path": "a.txt"})
        declined = await client.call_tool("delete_file", {"path": "b.txt"})
    assert not approved.is_error and text(approved) == "deleted a.txt"
    assert declined.is_error
    assert text(declined) == ("Error: deleting b.txt cannot be undone "
                              "(rejected by user: declined in the MCP client)")
    assert answers.questions[0] == ('Allow the tool call delete_file({"path": "a.txt"})?\n'
                                    "deleting a.txt cannot be undone")
    assert served_facts(facts) == ["deleted a.txt"]  # the declined call never ran


async def test_without_elicitation_the_policy_answers_and_says_so(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    async with served(facts) as client:  # no elicitation_callback: no capability declared
        result = await client.call_tool("delete_file", {"path": "a.txt"})
    assert result.is_error
    assert text(result) == ("Error: deleting a.txt cannot be undone (rejected by policy 'deny': "
                            "the MCP client cannot answer elicitations)")
    assert served_facts(facts) == []


@pytest.mark.parametrize("era", ERAS)
async def test_cancelling_the_request_aborts_the_tools_signal(tmp_path: Path, era: str) -> None:
    facts = tmp_path / "facts"
    async with served(facts, mode=era) as client:
        call = asyncio.create_task(client.call_tool("slow", {"tag": "one"}))
        await eventually(lambda: "start one" in served_facts(facts))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(lambda: len(served_facts(facts)) == 2)
        after = await client.call_tool("add", {"a": 1, "b": 1})  # the server carries on
    assert served_facts(facts) == ["start one", "signal one: cancelled by the MCP client"]
    assert text(after) == "2"


@pytest.mark.parametrize("era", ERAS)
async def test_run_code_on_a_real_kernel_with_progress_and_an_approval(
        tmp_path: Path, era: str) -> None:
    facts = tmp_path / "facts"
    answers = Answers("accept")
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    program = """
total = await tools.add({"a": 1, "b": 2})
print("deleting")
await tools.delete_file({"path": "c.txt"})
return total
"""
    async with served(facts, "--mode", "code", mode=era, elicitation_callback=answers) as client:
        listed = (await client.list_tools()).tools
        instructions = client.instructions
        result = await client.call_tool(
            "run_code", {"description": "add, then delete", "code": program},
            progress_callback=on_progress)
        direct = await client.call_tool("add", {"a": 1, "b": 2})
    assert [tool.name for tool in listed] == ["run_code"]
    description = listed[0].description or ""
    assert "Only `run_code` may be called directly." in description
    assert "async def add(self, args: AddArgs) -> int:" in description  # the SDK
    assert instructions is not None and "its description documents the `tools` SDK" in instructions
    assert not result.is_error, result
    assert result.structured_content == {"logs": ["deleting"], "result": 3}
    assert answers.questions == ['Allow the tool call delete_file({"path": "c.txt"})?\n'
                                 "deleting c.txt cannot be undone"]
    assert served_facts(facts) == ["deleted c.txt"]
    messages = [str(message) for _value, message in seen]
    assert messages[0] == "add started" and messages[2] == "delete_file started"
    assert messages[1].startswith("add done (") and messages[3].startswith("delete_file done (")
    assert [value for value, _message in seen] == [1, 2, 3, 4]
    assert direct.is_error and "only `run_code` is callable directly" in text(direct)


@pytest.mark.parametrize("era", ERAS)
async def test_a_ten_megabyte_print_reaches_the_client_cut_to_the_model_cap(
        tmp_path: Path, era: str) -> None:
    """Content, structuredContent and a failure's message: each what the model may read."""
    printing = "for i in range(10_000):\n    print(f'{i:05d}' + 'x' * 995)"
    lines = [f"{i:05d}" + "x" * 995 for i in range(10_000)]
    async with served(tmp_path / "facts", "--mode", "code", mode=era) as client:
        result = await client.call_tool("run_code", {"description": "print 10 MB",
                                                     "code": printing + "\nreturn 7"})
        failed = await client.call_tool("run_code", {"description": "print 10 MB, fail",
                                                     "code": printing + "\n1 / 0"})
    assert not result.is_error, result
    shown = text(result)
    assert len(shown) <= 50_000 and shown.startswith(lines[0]) and shown.endswith(
        lines[-1] + "\n7")
    assert shown.count(" of the output cut here: you see at most 50,000 of a run;") == 1
    structured: Any = result.structured_content
    assert structured["result"] == 7  # whole: only the logs were cut
    assert "\n".join([*structured["logs"], "7"]) == shown
    assert failed.is_error and len(text(failed)) <= 50_000
    assert text(failed).startswith("Error: code run failed (exception): Traceback")
    assert text(failed).endswith(lines[-1])
    assert failed.meta is not None
    assert "Error: " + failed.meta[ERROR_META_KEY]["message"] == text(failed)


async def test_cancelling_a_program_aborts_its_running_sub_call(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    async with served(facts, "--mode", "both") as client:
        call = asyncio.create_task(client.call_tool("run_code", {
            "description": "wait", "code": 'return await tools.slow({"tag": "inner"})'}))
        await eventually(lambda: "start inner" in served_facts(facts), seconds=60)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await eventually(lambda: len(served_facts(facts)) == 2)
        after = await client.call_tool("add", {"a": 2, "b": 2})
    assert served_facts(facts)[1] == "signal inner: cancelled by the MCP client"
    assert text(after) == "4"


async def test_a_scope_is_served_with_its_own_view(tmp_path: Path) -> None:
    async with served(tmp_path / "facts", tools="serve_support:served_scope") as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        hidden = await client.call_tool("delete_file", {"path": "x"})
    assert names == ["add", "forecast"]
    assert hidden.is_error and "unknown tool 'delete_file' in scope 'analyst'" in text(hidden)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_serving_while_the_client_keeps_stdin_open(tmp_path: Path,
                                                                  signum: int) -> None:
    """Reading stdin must not hold the server up: the SDK's own reader thread would wait
    for the client's next line before the process could exit."""
    stderr = tmp_path / "stderr"
    with stderr.open("w") as errors:
        process = subprocess.Popen(interruptible(serve_command()), stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=errors,
                                   env=serve_env(tmp_path / "facts"), cwd=HERE)
        try:
            deadline = time.monotonic() + 60
            while "serving MCP" not in stderr.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            process.send_signal(signum)
            returncode = process.wait(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdin is not None
            process.stdin.close()
    assert returncode == 0, stderr.read_text()
