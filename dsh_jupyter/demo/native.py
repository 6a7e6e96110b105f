"""The native-mode demo: a model-like sequence of tool calls through the pipeline."""

from __future__ import annotations

from typing import TextIO

from ..abort import AbortController
from ..registry import Deny, ToolCall, ToolExecution
from ..registry.policy import PreDecision
from .tools import sample_registry


async def run_demo(out: TextIO) -> int:
    registry = sample_registry()

    def no_tests(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        path = execution.arguments.get("path")
        if isinstance(path, str) and path.startswith("tests/"):
            return Deny("reading tests is not allowed in this demo")
        return None

    registry.on_pre_execute(no_tests)
    signal = AbortController().signal
    calls = [
        ("list_files", {"pattern": "src/*"}),
        ("read_file", {"path": "src/util.py"}),
        ("word_count", {"text": "count these four words"}),
        ("read_file", {"path": "tests/test_util.py"}),
        ("read_file", {"path": 42}),
    ]
    for i, (name, args) in enumerate(calls, 1):
        result = await registry.execute(ToolCall(call_id=f"call-{i}", name=name,
                                                 arguments=args, signal=signal))
        status = "error" if result.is_error else "ok"
        print(f"[{status}] {name}({args})", file=out)
        for line in result.text.splitlines():
            print(f"    {line}", file=out)
    return 0
