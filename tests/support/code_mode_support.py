"""Code Mode registries for tests, shared by the unit tests (which run programs with the
in-process runtime) and the kernel tests (which run the same programs on both runtimes):
``code_registry``, ``registry_of`` (stand-ins for a catalog of SDK tools), ``run`` (one
``run_code`` call) and the ``echo`` tool."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from dsh_jupyter import ToolCall, ToolRegistry, default_render, define_tool
from dsh_jupyter.codemode.sdk_python import SdkTool
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.registry.execution import ToolRunContext
from dsh_jupyter.runtime import CodeRuntime


def code_registry(runtime: CodeRuntime | None = None, **kw: Any) -> ToolRegistry:
    return ToolRegistry(mode=kw.pop("mode", "code"),
                        code_runtime=runtime if runtime is not None else InProcessRuntime(),
                        **kw)


def registry_of(tools: Iterable[SdkTool], runtime: CodeRuntime | None = None,
                mode: Any = "discovery") -> ToolRegistry:
    """Stand-ins for ``tools`` that return their name and arguments (so their output
    schema is "any": the catalog's would reject that value)."""
    registry = ToolRegistry(mode=mode, code_runtime=runtime or InProcessRuntime())
    for tool in tools:
        registry.register(define_tool(
            name=tool.name, description=tool.description, parameters=tool.parameters,
            output={"schema": {}, "render": default_render}, allow_unsupported_schema=True,
            execute=_echo(tool.name)))
    return registry


def _echo(name: str) -> Callable[[Any, ToolRunContext], Any]:
    def execute(args: Any, _ctx: ToolRunContext) -> Any:
        return {"tool": name, "args": args}

    return execute


async def run(registry: ToolRegistry, code: str, **kw: Any) -> Any:
    """The result of one ``run_code`` call (call id ``r1`` unless ``call_id`` says)."""
    return await registry.execute(ToolCall(call_id=kw.pop("call_id", "r1"), name="run_code",
                                           arguments={"code": code, "description": "test"},
                                           **kw))


def echo() -> Any:
    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=lambda args, ctx: args["text"])
