"""Spans over OTLP/HTTP to a real receiver: Arize Phoenix, started by the test, read back
through its REST API.

A registry on a real kernel runs a ``run_code`` program whose two sub-calls run in
parallel, then a native call that a policy denies; the spans go out through the SDK's
``OTLPSpanExporter`` and are checked as Phoenix stored them: names, the tree (the
sub-calls' parent is the run's span, in its trace), the GenAI attributes and the denied
call's error status.

Phoenix is big (about 850 MB, 140 packages, and it would downgrade some of ours), so it
lives in its own virtual environment, found through ``DSH_PHOENIX`` (the path of its
``phoenix`` command). Without it the test skips, saying how to install it; ``.ci/run``
installs it and sets ``DSH_REQUIRE_PHOENIX=1``, so in CI a missing Phoenix fails instead.
Phoenix's HTTP server binds 127.0.0.1; its gRPC receiver (unused here) always binds all
interfaces, on a free port, for the few seconds the test runs.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from dsh_jupyter import Deny, ToolCall, ToolExecution, ToolRegistry
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.registry.policy import PreDecision

pytestmark = pytest.mark.kernel

PROJECT = "dsh-jupyter-otlp-test"
INSTALL = ("python3 -m venv ~/.phoenix && ~/.phoenix/bin/pip install arize-phoenix, then "
           "export DSH_PHOENIX=~/.phoenix/bin/phoenix (.ci/run does this)")
READY_SECONDS = 60.0  # Phoenix starts in about 15 s on a 2-core machine
SPANS_SECONDS = 20.0  # ingestion is asynchronous


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Phoenix:
    """A ``phoenix serve`` process on free ports, its database in ``directory``."""

    def __init__(self, command: str, directory: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr = directory / "phoenix.stderr"
        env = {**os.environ,
               "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(self.port),
               "PHOENIX_GRPC_PORT": str(free_port()),
               "PHOENIX_WORKING_DIR": str(directory),
               # No analytics pixels, web fonts or other requests of its own to the internet.
               "PHOENIX_TELEMETRY_ENABLED": "false",
               "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
               "PHOENIX_DISABLE_AGENT_ASSISTANT": "true"}
        with (directory / "phoenix.stdout").open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen([command, "serve"], env=env, stdout=out,
                                            stderr=err, stdin=subprocess.DEVNULL)

    def tail(self, lines: int = 30) -> str:
        text = self.stderr.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    async def ready(self, client: httpx.AsyncClient) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"phoenix serve exited with {self.process.returncode}; stderr:\n"
                            f"{self.tail()}")
            try:
                if (await client.get(f"{self.url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.25)
        pytest.fail(f"phoenix serve not ready on {self.url} after {READY_SECONDS:.0f} s; "
                    f"stderr:\n{self.tail()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[Phoenix]:
    command = os.environ.get("DSH_PHOENIX", "")
    if not command or not os.access(command, os.X_OK):
        problem = (f"DSH_PHOENIX={command!r} is not an executable" if command
                   else "DSH_PHOENIX is not set")
        if os.environ.get("DSH_REQUIRE_PHOENIX") == "1":
            pytest.fail(f"{problem} and DSH_REQUIRE_PHOENIX=1; install: {INSTALL}")
        pytest.skip(f"Arize Phoenix is not installed ({problem}); install: {INSTALL}")
    server = Phoenix(command, tmp_path)  # starts now; the test waits for it later
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as http:
        yield http


async def lookup(city: str) -> str:
    """The weather in a city."""
    await asyncio.sleep(0.2)  # long enough for the two sub-calls to overlap
    return f"sunny in {city}"


async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def no_deleting(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
    return Deny("nothing is deleted here") if execution.name == "delete_file" else None


async def read_spans(phoenix: Phoenix, client: httpx.AsyncClient,
                     count: int) -> dict[str, dict[str, Any]]:
    """The project's spans by call id, once ``count`` of them have arrived."""
    deadline = time.monotonic() + SPANS_SECONDS
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        response = await client.get(f"{phoenix.url}/v1/projects/{PROJECT}/spans",
                                    params={"limit": 100})
        if response.status_code == 200:  # 404 until the project's first span is stored
            spans = response.json()["data"]
            if len(spans) >= count:
                break
        await asyncio.sleep(0.25)
    assert len(spans) == count, (f"Phoenix has {len(spans)} of {count} spans after "
                                 f"{SPANS_SECONDS:.0f} s: {spans}\nstderr:\n{phoenix.tail()}")
    return {span["attributes"]["gen_ai.tool.call.id"]: span for span in spans}


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


async def test_spans_reach_phoenix_over_otlp_http(phoenix: Phoenix,
                                                  client: httpx.AsyncClient) -> None:
    exporter = OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")
    provider = TracerProvider(resource=Resource.create({
        "service.name": "dsh-jupyter-tests", "openinference.project.name": PROJECT}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    registry = ToolRegistry(mode="both")  # run_code, and native calls too
    registry.tool(lookup, is_concurrency_safe=lambda args: True)
    registry.tool(delete_file)
    registry.on_pre_execute(no_deleting)
    registry.instrument(provider)
    try:
        async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
            registry.code_runtime = runtime
            await phoenix.ready(client)  # started with the fixture, alongside the kernel
            run = await registry.execute(ToolCall(call_id="r1", name="run_code", arguments={
                "code": "a, b = await asyncio.gather(tools.lookup({'city': 'Oslo'}),\n"
                        "                            tools.lookup({'city': 'Lima'}))\n"
                        "return [a, b]",
                "description": "weather in two cities"}))
            denied = await registry.execute(ToolCall(call_id="d1", name="delete_file",
                                                     arguments={"path": "notes.txt"}))
        assert not run.is_error, run
        assert denied.error is not None and denied.error.code == "DENIED"
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()

    spans = await read_spans(phoenix, client, count=4)
    assert set(spans) == {"r1", "r1:code:1", "r1:code:2", "d1"}
    run_span, first, second, denied_span = (spans[i] for i in ("r1", "r1:code:1",
                                                                "r1:code:2", "d1"))

    assert run_span["name"] == "execute_tool run_code"
    assert run_span["parent_id"] is None
    assert run_span["status_code"] == "UNSET"
    assert run_span["attributes"] | {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "run_code",
        "dsh.run_code.description": "weather in two cities",
        "dsh.pre_execute.decision": "allow"} == run_span["attributes"]

    trace_id = run_span["context"]["trace_id"]
    for sub in (first, second):
        assert sub["name"] == "execute_tool lookup"
        assert sub["parent_id"] == run_span["context"]["span_id"]
        assert sub["context"]["trace_id"] == trace_id
        assert sub["status_code"] == "UNSET"
        assert sub["attributes"]["gen_ai.tool.name"] == "lookup"
    # Parallel: each sub-call started before the other ended, inside the run.
    assert when(first["start_time"]) < when(second["end_time"])
    assert when(second["start_time"]) < when(first["end_time"])
    assert when(run_span["start_time"]) <= min(when(first["start_time"]),
                                               when(second["start_time"]))
    assert max(when(first["end_time"]), when(second["end_time"])) <= when(
        run_span["end_time"])

    assert denied_span["name"] == "execute_tool delete_file"
    assert denied_span["parent_id"] is None
    assert denied_span["context"]["trace_id"] != trace_id
    assert denied_span["status_code"] == "ERROR"
    assert denied_span["status_message"] == "DENIED"
    assert denied_span["attributes"] | {
        "gen_ai.tool.name": "delete_file", "dsh.pre_execute.decision": "deny",
        "dsh.error.code": "DENIED", "error.type": "DENIED"} == denied_span["attributes"]
    assert "nothing is deleted here" not in str(denied_span)  # messages are not recorded
