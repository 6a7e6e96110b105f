"""Code Mode registries for tests, shared by the unit tests (which run programs with the
in-process runtime) and the kernel tests (which run the same programs on both runtimes):
``code_registry``, ``run`` (one ``run_code`` call) and the ``echo`` tool."""

from __future__ import annotations

from typing import Any

from dsh_jupyter import ToolCall, ToolRegistry, define_tool
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.runtime import CodeRuntime


def code_registry(runtime: CodeRuntime | None = None, **kw: Any) -> ToolRegistry:
    return ToolRegistry(mode=kw.pop("mode", "code"),
                        code_runtime=runtime if runtime is not None else InProcessRuntime(),
                        **kw)


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
