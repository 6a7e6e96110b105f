"""The ``dsh-jupyter`` command line.

    dsh-jupyter demo                                  # run_code in a fresh kernel, sample tools
    dsh-jupyter run PROGRAM.py --tools MODULE:ATTR [--mode code|both] [--json]
    dsh-jupyter sdk --tools MODULE:ATTR [--scope NAME]     # ATTR may be an async context manager
    dsh-jupyter serve-mcp --tools MODULE:ATTR [--mode native|code|both] [--http HOST:PORT]
                          [--token TOKEN] [--allow-host NAME ...]
    dsh-jupyter eval [--modes MODE ...] [-p NAME VALUE] [--param-file FILE] [-o DIR]
    dsh-jupyter export SESSION.jsonl -o NOTEBOOK.ipynb [--tools MODULE:ATTR] [--no-values]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

from ._help import plain_help
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
    serve = commands.add_parser("serve-mcp", help="serve a registry's tools as an MCP server")
    serve.add_argument("--tools", required=True,
                       help="MODULE:ATTR naming a ToolRegistry or an AgentScope")
    serve.add_argument("--mode", choices=("native", "code", "both", "discovery"), default=None,
                       help="how to present the tools (default: the registry's own mode)")
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
    evaluate = commands.add_parser("eval", help="run the evaluation notebook through papermill")
    add_eval_arguments(evaluate)
    export = commands.add_parser("export", help="export a session log to a runnable notebook")
    add_export_arguments(export)
    options = parser.parse_args(argv)
    if options.command == "eval":
        return run_eval(options)
    if options.command == "export":
        return run_export(options)
    if options.command == "demo":
        from .demo.tools import sample_registry

        return asyncio.run(_run(sample_registry(), DEMO_PROGRAM, "Find the longest Python file",
                                "code", as_json=False, out=sys.stdout))
    if options.command == "serve-mcp":
        from .mcp.serve_command import run_serve

        return run_serve(lambda: open_tools(options.tools), options)
    if options.command == "sdk":
        return asyncio.run(_print_sdk(options.tools, options.scope, out=sys.stdout))
    registry = load_registry(options.tools)
    program = options.program.read_text(encoding="utf-8")
    description = options.description or f"Run {options.program.name}"
    return asyncio.run(_run(registry, program, description, options.mode,
                            as_json=options.json, out=sys.stdout))


def load_registry(spec: str) -> ToolRegistry:
    """Import ``MODULE:ATTR``; ATTR may be a registry or a function returning one."""
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry):
        target = target()
    if not isinstance(target, ToolRegistry):
        raise SystemExit(f"{spec!r} is a {type(target).__name__}, not a ToolRegistry")
    return target


def load_tools(spec: str) -> ToolRegistry | AgentScope:
    """Import ``MODULE:ATTR``: a registry or an agent scope, or a function returning one."""
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry | AgentScope):
        target = target()
    return _tools_or_exit(spec, target, "is")


@asynccontextmanager
async def open_tools(spec: str) -> AsyncIterator[ToolRegistry | AgentScope]:
    """``MODULE:ATTR`` as a registry or scope for the length of the block. ATTR may be a
    registry or an agent scope, a function returning one, or an async context manager
    yielding one (or a function returning such a manager, e.g. an
    ``@asynccontextmanager`` function): that is how a registry with MCP tools is given,
    since its connections live inside ``async with``::

        @asynccontextmanager
        async def tools():
            registry = ToolRegistry()
            async with connect_mcp(registry, stdio=["mcp-server-time"]):
                yield registry
    """
    target = _import_target(spec)
    if callable(target) and not isinstance(target, ToolRegistry | AgentScope):
        target = target()
    if isinstance(target, AbstractAsyncContextManager):
        async with target as entered:
            yield _tools_or_exit(spec, entered, "yields")
    else:
        yield _tools_or_exit(spec, target, "is")


@asynccontextmanager
async def open_registry(spec: str) -> AsyncIterator[ToolRegistry]:
    """:func:`open_tools` where only a registry will do."""
    async with open_tools(spec) as tools:
        if not isinstance(tools, ToolRegistry):
            raise SystemExit(f"{spec!r} is an AgentScope; name its registry and pass "
                             f"--scope {tools.name}")
        yield tools


def _tools_or_exit(spec: str, value: object, verb: str) -> ToolRegistry | AgentScope:
    if not isinstance(value, ToolRegistry | AgentScope):
        raise SystemExit(f"{spec!r} {verb} a {type(value).__name__}, not a ToolRegistry or an "
                         "AgentScope (or an async context manager yielding one)")
    return value


def _import_target(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--tools expects MODULE:ATTR, got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"cannot load {spec!r}: {exc}") from None


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
