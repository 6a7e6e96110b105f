"""A journaled host for the durable tests: a process that runs a program on a real kernel
with a journal, or resumes a run from it, on tools that count their bodies in a file.

    python journal_host.py JOURNAL COUNTS start PROGRAM     # runs until killed, or ends
    python journal_host.py JOURNAL COUNTS resume RUN_ID [approve]

``rm`` asks for approval and nobody in the host answers (the card of a notebook nobody
clicks): the host prints ``WAITING``. ``send`` prints ``SENDING`` and takes ten minutes (a
host killed mid-body). When a run ends the host prints its result as one JSON line
(``is_error``, ``text``, ``value``). ``resume`` takes the decision recorded already, or
approves with the note "ok" given ``approve``. ``tools`` is the same tools for
``dsh-jupyter approvals ... --tools journal_host:tools`` (the count file from
``DSH_TEST_COUNTS``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import Approval, Ask, PreDecision


class NobodyAnswers:
    async def request(self, execution: ToolExecution, reason: str | None) -> Approval:
        print("WAITING", flush=True)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def tools(counts: str | None = None) -> ToolRegistry:
    """The tools, counting each body in ``counts`` (default: ``$DSH_TEST_COUNTS``)."""
    path = counts or os.environ["DSH_TEST_COUNTS"]
    registry = ToolRegistry(mode="code")

    def count(line: str) -> None:
        with open(path, "a") as file:
            file.write(line + "\n")

    @registry.tool(is_concurrency_safe=lambda _args: True)
    async def read(path: str) -> str:
        """Read a file."""
        count(f"read {path}")
        return f"<{path}>"

    @registry.tool(is_concurrency_safe=lambda _args: True)
    async def rm(path: str) -> str:
        """Remove a file."""
        count(f"rm {path}")
        return f"removed {path}"

    @registry.tool(is_concurrency_safe=lambda _args: True)
    async def send(to: str) -> str:
        """Send a mail: slow, and the host dies while it runs."""
        count(f"send {to}")
        print("SENDING", flush=True)
        await asyncio.sleep(600)
        return "sent"

    def ask_for_rm(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        return Ask("rm deletes") if execution.name == "rm" else None

    registry.on_pre_execute(ask_for_rm)
    return registry


async def main(journal: str, counts: str, how: str, what: str, *rest: str) -> None:
    from dsh_jupyter.kernel import KernelRuntime

    async with KernelRuntime() as runtime:
        registry = tools(counts)
        registry.code_runtime = runtime
        registry.journal = journal
        registry.approval = NobodyAnswers()
        if how == "start":
            result = await registry.execute(ToolCall(
                call_id="c1", name="run_code", arguments={"code": what,
                                                          "description": "clean up"}))
        else:
            decision = Approval(approved=True, note="ok") if rest == ("approve",) else None
            result = await registry.resume(what, decision)
        print(json.dumps({"is_error": result.is_error, "text": result.text,
                          "value": result.value}), flush=True)
        await registry.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
