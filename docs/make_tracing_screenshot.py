"""Regenerate ``docs/img/tracing-phoenix.png``: a traced agent run, as Arize Phoenix shows it.

Starts ``phoenix serve`` (the command ``DSH_PHOENIX`` names, or ``--phoenix``) on free
ports with its database in a temporary directory, runs :func:`workload` with the
global tracer provider exporting to it over OTLP/HTTP, then opens the run's trace in
Debian's chromium (headless, never a downloaded browser) and saves the trace panel::

    DSH_PHOENIX=~/.phoenix/bin/phoenix python docs/make_tracing_screenshot.py

Needs the ``test`` and ``browser`` extras (the OTLP exporter, playwright) and
``/usr/bin/chromium``; Phoenix in its own venv, as ``.ci/run`` installs it. The
picture shows durations and ids, so it differs on every run: it is rewritten only when
this script is run, never by the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from playwright.sync_api import sync_playwright

from dsh_jupyter import ToolRegistry
from dsh_jupyter.agent import run_agent
from dsh_jupyter.agent.adapters.scripted import ScriptedModel
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig

OUTPUT = Path(__file__).resolve().parent / "img" / "tracing-phoenix.png"
CHROMIUM = os.environ.get("DSH_CHROMIUM", "/usr/bin/chromium")
PROJECT = "dsh-jupyter"

PROGRAM = """\
oslo, lima = await asyncio.gather(tools.weather({'city': 'Oslo'}),
                                  tools.weather({'city': 'Lima'}))
return await tools.save_note({'text': f'{oslo}; {lima}'})
"""


async def workload() -> None:
    """One agent run on a real kernel: the scripted model calls ``run_code`` with a
    program making two sub-calls in parallel and one after, then answers. Spans go to
    the global tracer provider (``registry.instrument()`` with no argument)."""
    registry = ToolRegistry(mode="code")

    @registry.tool(is_concurrency_safe=lambda args: True)
    async def weather(city: str) -> str:
        """The weather in a city."""
        await asyncio.sleep(0.3)
        return f"sunny in {city}"

    @registry.tool
    async def save_note(text: str) -> str:
        """Save a note; returns its id."""
        await asyncio.sleep(0.1)
        return "note-1"

    model = ScriptedModel([
        {"tool_calls": [{"name": "run_code", "arguments": {
            "code": PROGRAM, "description": "weather in Oslo and Lima, saved as a note"}}]},
        {"content": "Sunny in both; saved as note-1."},
    ], name="scripted-weather")
    registry.instrument()
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        registry.code_runtime = runtime
        result = await run_agent(registry, model, "What is the weather in Oslo and Lima? "
                                                  "Save it as a note.")
    if result.stop != "answered":
        raise SystemExit(f"the workload's agent run ended {result.stop}: {result.error}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_phoenix(command: str, directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_WORKING_DIR": str(directory),
           "PHOENIX_TELEMETRY_ENABLED": "false", "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
           "PHOENIX_DISABLE_AGENT_ASSISTANT": "true"}
    log = (directory / "phoenix.log").open("wb")
    process = subprocess.Popen([command, "serve"], env=env, stdout=log, stderr=log,
                               stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    process.kill()
    tail = (directory / "phoenix.log").read_text(errors="replace")[-3000:]
    raise SystemExit(f"phoenix serve did not start on {url}:\n{tail}")


def root_trace_id(url: str) -> str:
    """The trace id of the workload's root span, once Phoenix has stored it."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        response = httpx.get(f"{url}/v1/projects/{PROJECT}/spans", params={"limit": 100})
        if response.status_code == 200:
            roots = [s for s in response.json()["data"] if s["parent_id"] is None]
            if roots:
                trace_id: str = roots[0]["context"]["trace_id"]
                return trace_id
        time.sleep(0.25)
    raise SystemExit("Phoenix received no root span")


def screenshot(url: str, trace_id: str, output: Path) -> None:
    """The trace panel: the span tree on the left, the run_code span's attributes."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        page.goto(f"{url}/redirects/traces/{trace_id}")  # Phoenix's link to a trace by id
        page.wait_for_load_state("networkidle")
        panel = page.get_by_role("dialog")
        # The run_code span: its attributes say how the program ran (kernel, budgets). A
        # tool span's attribute table is open by default.
        panel.get_by_text("execute_tool run_code", exact=True).first.click()
        page.wait_for_url("**selectedSpanNodeId=**")
        panel.get_by_text("dsh.kernel.source", exact=True).wait_for()
        page.wait_for_timeout(500)  # the section's opening animation
        panel.screenshot(path=str(output))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix", default=os.environ.get("DSH_PHOENIX"),
                        help="the phoenix command (default: $DSH_PHOENIX)")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    if not args.phoenix:
        sys.exit("no Phoenix: pass --phoenix or set DSH_PHOENIX (see docs/tracing.md)")
    with tempfile.TemporaryDirectory(prefix="dsh-phoenix-") as directory:
        process, url = start_phoenix(args.phoenix, Path(directory))
        try:
            provider = TracerProvider(resource=Resource.create({
                "service.name": "dsh-jupyter", "openinference.project.name": PROJECT}))
            provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
            trace.set_tracer_provider(provider)
            asyncio.run(workload())
            provider.force_flush()
            screenshot(url, root_trace_id(url), args.output)
            print(f"wrote {args.output}")
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
