"""A journaled host for the durable tests: a process that runs a program on a real kernel
with a journal, or resumes a run from it, on tools that count their bodies in a file.

    python journal_host.py JOURNAL COUNTS start PROGRAM [in=SCOPE]   # until killed, or ends
    python journal_host.py JOURNAL COUNTS resume RUN_ID [approve] [in=SCOPE]

``rm`` asks for approval and nobody in the host answers (the card of a notebook nobody
clicks): the host prints ``WAITING``. ``send`` prints ``SENDING`` and takes ten minutes (a
host killed mid-body). When a run ends the host prints its result as one JSON line
(``is_error``, ``text``, ``value``). ``resume`` takes the decision recorded already, or
approves with the note "ok" given ``approve``. ``tools`` is the same tools for
``dsh-jupyter approvals ... --tools journal_host:tools`` (the count file from
``DSH_TEST_COUNTS``). ``in=SCOPE`` makes the agent scope SCOPE first (its own policy
denies reading b.txt) and starts the run in it, or has it there for the resume to find."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from dsh_jupyter import ToolCall, ToolRegistry
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import Approval, Ask, Deny, PreDecision
from dsh_jupyter.registry.scope import AgentScope


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


def scope(registry: ToolRegistry, name: str) -> AgentScope:
    """Scope ``name``, whose own policy denies reading b.txt (the registry's allows it)."""
    made = registry.scope(name)

    def no_b(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        return Deny(f"b.txt is not {name}'s") \
            if execution.name == "read" and execution.arguments == {"path": "b.txt"} else None

    made.on_pre_execute(no_b)
    return made


async def main(journal: str, counts: str, how: str, what: str, *rest: str) -> None:
    from dsh_jupyter.kernel import KernelRuntime

    async with KernelRuntime() as runtime:
        registry = tools(counts)
        registry.code_runtime = runtime
        registry.journal = journal
        registry.approval = NobodyAnswers()
        named = [each.removeprefix("in=") for each in rest if each.startswith("in=")]
        agent = scope(registry, named[0]) if named else None
        if how == "start":
            result = await registry.execute(ToolCall(
                call_id="c1", name="run_code", agent=agent,
                arguments={"code": what, "description": "clean up"}))
        else:
            decision = Approval(approved=True, note="ok") if "approve" in rest else None
            result = await registry.resume(what, decision)  # finds its scope by name
        print(json.dumps({"is_error": result.is_error, "text": result.text,
                          "value": result.value}), flush=True)
        await registry.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
