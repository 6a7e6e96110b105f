"""The ``dsh-jupyter`` command line.

    dsh-jupyter demo                                  # run_code in a fresh kernel, sample tools
    dsh-jupyter run PROGRAM.py --tools MODULE:ATTR [--mode code|both] [--json]
    dsh-jupyter sdk --tools MODULE:ATTR [--scope NAME]     # ATTR may be an async context manager
    dsh-jupyter serve-mcp --tools MODULE:ATTR [--mode native|code|both|discovery]
                          [--http HOST:PORT] [--token TOKEN] [--allow-host NAME ...]
                          [--policy FILE] [--journal PATH]
    dsh-jupyter serve-mcp --wrap [--mode ...] [--policy FILE] -- CMD [ARG ...]
    dsh-jupyter serve-mcp --wrap-url URL [--wrap-header 'NAME: VALUE' ...] [--mode ...]
    dsh-jupyter eval [--modes MODE ...] [-p NAME VALUE] [--param-file FILE] [-o DIR]
    dsh-jupyter export SESSION.jsonl -o NOTEBOOK.ipynb [--tools MODULE:ATTR] [--no-values]
    dsh-jupyter approvals list --journal PATH [--json]     # runs waiting for an approval
    dsh-jupyter approvals approve|reject RUN_ID --journal PATH [--note TEXT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
)
from pathlib import Path
from typing import Any, TextIO

from . import loading
from ._help import plain_help
from .durable.command import add_arguments as add_approvals_arguments
from .durable.command import run_command as run_approvals
from .evaluation.command import add_arguments as add_eval_arguments
from .evaluation.command import run_command as run_eval
from .events import SessionEvent
from .registry import AgentScope, ToolCall, ToolRegistry
from .registry.results import ToolResult
from .sessions.command import add_arguments as add_export_arguments
from .sessions.command import run_command as run_export

DEMO_PROGRAM = '''\
# A program a model might write: find the Python files, read them in parallel,
# and report the longest one.
names = await tools.list_files({"pattern": "*.py"})
texts = await asyncio.gather(*(tools.read_file({"path": n}) for n in names))
sizes = {name: len(text.splitlines()) for name, text in zip(names, texts)}
print(f"read {len(names)} files")
try:
    await tools.read_file({"path": "missing.py"})
except ToolCallError as error:
    print(f"as expected, {error.tool_name} failed: {error}")
return {"longest": max(sizes, key=sizes.get), "lines": sizes}
'''

SERVE_MCP_HELP = """\
Serve tools to MCP clients, over stdio (the default) or streamable HTTP (--http): a
registry's (--tools MODULE:ATTR), or any other MCP server's, in Code Mode by default (--wrap
and --wrap-url). Every call, and every call a run_code program makes, goes through the
registry's pipeline: --policy rules, approvals asked of the client by elicitation, events.

    dsh-jupyter serve-mcp --wrap -- npx -y @modelcontextprotocol/server-filesystem /data
    dsh-jupyter serve-mcp --wrap --mode discovery --policy policy.toml -- uvx mcp-server-git
    dsh-jupyter serve-mcp --wrap-url http://127.0.0.1:9000/mcp --http 8765

A --policy file (TOML or JSON) denies or asks per tool-name pattern; the first of deny,
ask, allow that matches decides, else default:

    deny = ["git_reset"]
    ask = ["git_commit", "write_*"]
    default = "allow"
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsh-jupyter", description=plain_help(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run a program through run_code in a fresh kernel")
    run = commands.add_parser("run", help="run a program file through run_code")
    run.add_argument("program", type=Path)
    run.add_argument("--tools", required=True, help="MODULE:ATTR naming a ToolRegistry")
    run.add_argument("--mode", choices=("code", "both", "discovery"), default="code")
    run.add_argument("--description", default=None)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    sdk = commands.add_parser("sdk", help="print the SDK section the model would see")
    sdk.add_argument("--tools", required=True,
                     help="MODULE:ATTR naming a ToolRegistry, a function returning one, or an "
                          "async context manager yielding one (e.g. one with MCP tools)")
    sdk.add_argument("--scope", default=None)
    serve = commands.add_parser(
        "serve-mcp", help="serve a registry's tools, or another MCP server's, as an MCP server",
        usage="%(prog)s (--tools MODULE:ATTR | --wrap-url URL | --wrap) [options] "
              "[-- CMD [ARG ...]]",
        description=plain_help(SERVE_MCP_HELP),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--tools", help="MODULE:ATTR naming a ToolRegistry or an AgentScope")
    source.add_argument("--wrap", action="store_true",
                        help="serve the tools of the stdio MCP server started by the command "
                             "after -- (stopped when serving stops)")
    source.add_argument("--wrap-url", metavar="URL", default=None,
                        help="serve the tools of the streamable-HTTP MCP server at URL")
    serve.add_argument("server_command", nargs="*", metavar="CMD",
                       help="with --wrap: the server's command and its arguments, after --")
    serve.add_argument("--wrap-header", metavar="'NAME: VALUE'", action="append", default=[],
                       dest="wrap_headers",
                       help="with --wrap-url: an HTTP header to send (e.g. 'Authorization: "
                            "Bearer ...'); repeatable")
    serve.add_argument("--mode", choices=("native", "code", "both", "discovery"), default=None,
                       help="how to present the tools (default: the registry's own mode; "
                            "code for --wrap and --wrap-url)")
    serve.add_argument("--policy", metavar="FILE", default=None,
                       help="a .toml or .json file of deny, ask and allow rules by tool-name "
                            "pattern (ask: approved by the client, as an elicitation)")
    serve.add_argument("--http", metavar="HOST:PORT", default=None,
                       help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                            "(PORT alone binds 127.0.0.1)")
    serve.add_argument("--token", default=None,
                       help="bearer token HTTP requests must carry (default: $DSH_MCP_TOKEN; "
                            "generated and printed when bound to any address but 127.0.0.1, "
                            "::1 or localhost)")
    serve.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                       dest="allow_hosts",
                       help="also answer requests whose Host is NAME (any port), e.g. the "
                            "name a reverse proxy forwards; repeatable (default: only the "
                            "bound address and port, and localhost on 127.0.0.1 or ::1)")
    serve.add_argument("--name", default="dsh-jupyter", help="the server name clients see")
    serve.add_argument("--journal", metavar="PATH", default=None,
                       help="journal run_code runs in the SQLite file PATH (created if new), "
                            "so a run waiting for an approval survives a restart: a client's "
                            "retry with its requestState resumes it")
    evaluate = commands.add_parser("eval", help="run the evaluation notebook through papermill")
    add_eval_arguments(evaluate)
    export = commands.add_parser("export", help="export a session log to a runnable notebook")
    add_export_arguments(export)
    approvals = commands.add_parser("approvals", help="list, approve or reject the approvals "
                                    "journaled runs wait for")
    add_approvals_arguments(approvals)
    options = parser.parse_args(argv)
    if options.command == "approvals":
        return run_approvals(options)
    if options.command == "eval":
        return run_eval(options)
    if options.command == "export":
        return run_export(options)
    if options.command == "demo":
        from .demo.tools import sample_registry

        return asyncio.run(_run(sample_registry(), DEMO_PROGRAM, "Find the longest Python file",
                                "code", as_json=False, out=sys.stdout))
    if options.command == "serve-mcp":
        return _serve_mcp(serve, options)
    if options.command == "sdk":
        return asyncio.run(_print_sdk(options.tools, options.scope, out=sys.stdout))
    registry = load_registry(options.tools)
    program = options.program.read_text(encoding="utf-8")
    description = options.description or f"Run {options.program.name}"
    return asyncio.run(_run(registry, program, description, options.mode,
                            as_json=options.json, out=sys.stdout))


def _serve_mcp(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from .mcp.serve_command import Served, run_serve

    command: list[str] = options.server_command
    if options.wrap and not command:
        parser.error("--wrap needs the server's command after --, e.g. "
                     "--wrap -- npx -y @modelcontextprotocol/server-everything")
    if command and not options.wrap:
        parser.error(f"unexpected arguments {' '.join(command)!r}: a stdio server to wrap "
                     "goes after --wrap --")
    if options.wrap_headers and options.wrap_url is None:
        parser.error("--wrap-header applies to --wrap-url")
    headers = dict(_header(parser, text) for text in options.wrap_headers) or None
    if options.tools is not None:
        def open_target() -> AbstractAsyncContextManager[Served]:
            return open_tools(options.tools)
    else:
        from .mcp.wrap import open_wrapped

        options.mode = options.mode or "code"
        stdio, url = (command, None) if options.wrap else (None, options.wrap_url)

        def open_target() -> AbstractAsyncContextManager[Served]:
            return open_wrapped(stdio=stdio, url=url, headers=headers)
    return run_serve(open_target, options)


def _header(parser: argparse.ArgumentParser, text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or " " in name.strip():
        parser.error(f"--wrap-header expects 'NAME: VALUE', got {text!r}")
    return name.strip(), value.strip()


def load_registry(spec: str) -> ToolRegistry:
    """:func:`dsh_jupyter.loading.load_registry`; a bad spec exits with its message."""
    with _exit_on_bad_spec():
        return loading.load_registry(spec)


def load_tools(spec: str) -> ToolRegistry | AgentScope:
    """:func:`dsh_jupyter.loading.load_tools`; a bad spec exits with its message."""
    with _exit_on_bad_spec():
        return loading.load_tools(spec)


@asynccontextmanager
async def open_tools(spec: str) -> AsyncIterator[ToolRegistry | AgentScope]:
    """:func:`dsh_jupyter.loading.open_tools`; a bad spec exits with its message (an error
    inside the block is the block's)."""
    async with AsyncExitStack() as stack:
        with _exit_on_bad_spec():
            tools = await stack.enter_async_context(loading.open_tools(spec))
        yield tools


@asynccontextmanager
async def open_registry(spec: str) -> AsyncIterator[ToolRegistry]:
    """:func:`dsh_jupyter.loading.open_registry`; a bad spec exits with its message."""
    async with AsyncExitStack() as stack:
        with _exit_on_bad_spec():
            registry = await stack.enter_async_context(loading.open_registry(spec))
        yield registry


@contextmanager
def _exit_on_bad_spec() -> Iterator[None]:
    try:
        yield
    except loading.ToolsSpecError as exc:
        raise SystemExit(str(exc)) from None


async def _print_sdk(spec: str, scope_name: str | None, *, out: TextIO) -> int:
    from .codemode.prompt import sdk_section

    async with open_registry(spec) as registry:
        scope = registry.find_scope(scope_name) if scope_name else None
        if registry.mode_for(scope) == "discovery":  # what the model sees is the index
            section = registry.prompt(scope).section("tools:sdk")
            assert section is not None
            print(section.text, file=out)
        else:
            print(sdk_section(registry, scope, language="python").text, file=out)
    return 0


async def _run(registry: ToolRegistry, program: str, description: str, mode: str, *,
               as_json: bool, out: TextIO) -> int:
    from .kernel import KernelRuntime

    events: list[SessionEvent] = []
    registry.on_event(events.append)
    if not as_json:
        registry.on_event(lambda event: _print_event(event, out))
    registry.mode = mode  # type: ignore[assignment]
    async with KernelRuntime() as runtime:
        registry.code_runtime = runtime
        result = await registry.execute(ToolCall(
            call_id="cli-1", name="run_code",
            arguments={"code": program, "description": description}))
    if as_json:
        json.dump(_as_json(result, events), out, indent=2)
        out.write("\n")
    else:
        status = "failed" if result.is_error else "ok"
        print(f"\nrun_code {status}:\n{result.text}", file=out)
    return 1 if result.is_error else 0


def _print_event(event: SessionEvent, out: TextIO) -> None:
    if event["kind"] == "tool/code-dispatch-start":
        print(f"  -> {event['call_id']} {event['name']}({json.dumps(event['arguments'])})",
              file=out)
    elif event["kind"] == "tool/code-dispatch":
        status = "error" if event["is_error"] else "ok"
        elapsed = (event["ended"] - event["started"]) * 1000
        print(f"  <- {event['call_id']} {status} ({elapsed:.1f} ms)", file=out)


def _as_json(result: ToolResult, events: list[SessionEvent]) -> dict[str, Any]:
    body: dict[str, Any] = {"is_error": result.is_error, "content": result.text}
    if result.error is not None:
        body["error"] = {"message": result.error.message, "code": result.error.code}
    else:
        body["value"] = result.value
    body["events"] = events
    return body


if __name__ == "__main__":
    raise SystemExit(main())
