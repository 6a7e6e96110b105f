"""What journaling costs a run (``ToolRegistry(journal=...)``, docs/approvals-durable.md).

One program making N sequential sub-calls, run on ``InProcessRuntime`` (no kernel, so the
figure is the registry's and the journal's, not a kernel's) by two registries with the
same tools, one journaled and one not, in alternating rounds; printed: the median run of
each, the journal's cost per sub-call (three writes: issued, started, done, each one
SQLite transaction; the started mark with an fsync), and the ratio. Then a
resume: the same run paused before its last call and resumed, against running it afresh,
so the price of answering the first N-1 calls from the journal shows.

    python bench/journal.py [--calls 50] [--rounds 9]

The journal lives in a temporary folder on the disk ``tempfile`` picks; a disk with a
slower fsync (a network volume) costs more per write.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from dsh_jupyter import AbortController, Approval, Ask, ToolCall, ToolRegistry
from dsh_jupyter.kernel import InProcessRuntime
from dsh_jupyter.registry.execution import ToolExecution
from dsh_jupyter.registry.policy import PreDecision


def registry(journal: Path | None) -> ToolRegistry:
    made = ToolRegistry(mode="code", code_runtime=InProcessRuntime(), journal=journal)

    @made.tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @made.tool
    async def commit(total: int) -> str:
        """Record a total: asks for approval."""
        return f"committed {total}"

    def ask(execution: ToolExecution, decision: PreDecision) -> PreDecision | None:
        return Ask("commit writes") if execution.name == "commit" else None

    made.on_pre_execute(ask)
    return made


def program(calls: int, *, commit: bool = False) -> str:
    body = f"t = 0\nfor i in range({calls}):\n    t = await tools.add({{'a': t, 'b': i}})\n"
    return body + ("return await tools.commit({'total': t})" if commit else "return t")


async def timed(target: ToolRegistry, code: str, call_id: str) -> float:
    started = time.perf_counter()
    result = await target.execute(ToolCall(call_id=call_id, name="run_code",
                                           arguments={"code": code, "description": "bench"}))
    assert not result.is_error, result.text
    return time.perf_counter() - started


class NobodyAnswers:
    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def request(self, _execution: ToolExecution, _reason: str | None) -> Approval:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def paused_run(folder: Path, calls: int) -> tuple[Path, str]:
    """A journal holding one run paused on its last call (commit), its host gone."""
    path = folder / f"paused-{time.perf_counter_ns()}.sqlite"
    host = registry(path)
    host.approval = card = NobodyAnswers()
    stop = AbortController()
    run = asyncio.ensure_future(host.execute(ToolCall(
        call_id="p", name="run_code", signal=stop.signal,
        arguments={"code": program(calls, commit=True), "description": "bench"})))
    await card.asked.wait()
    stop.abort("gone")
    await run
    (pending,) = await host.journal.list_pending()  # type: ignore[union-attr]
    await host.aclose()
    return path, pending.run_id


async def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        plain, journaled = registry(None), registry(Path(folder) / "runs.sqlite")
        code = program(calls)
        await timed(plain, code, "warm-plain")
        await timed(journaled, code, "warm-journaled")
        without, with_journal = [], []
        for n in range(rounds):
            without.append(await timed(plain, code, f"plain-{n}"))
            with_journal.append(await timed(journaled, code, f"journaled-{n}"))
        await journaled.aclose()

        fresh, resumed = [], []
        for n in range(rounds):
            fresh_registry = registry(Path(folder) / f"fresh-{n}.sqlite")
            fresh_registry.approval = _approve
            fresh.append(await timed(fresh_registry, program(calls, commit=True), f"f-{n}"))
            await fresh_registry.aclose()
            path, run_id = await paused_run(Path(folder), calls)
            again = registry(path)
            started = time.perf_counter()
            result = await again.resume(run_id, Approval(approved=True))
            resumed.append(time.perf_counter() - started)
            assert not result.is_error, result.text
            await again.aclose()

    a, b = statistics.median(without) * 1000, statistics.median(with_journal) * 1000
    print(f"{calls} sequential sub-calls, InProcessRuntime, {rounds} alternating rounds, "
          f"medians")
    print(f"  not journaled       {a:8.2f} ms  ({a / calls:.3f} ms a sub-call)")
    print(f"  journaled           {b:8.2f} ms  ({b / calls:.3f} ms a sub-call)")
    print(f"  journal's cost      {(b - a) / calls:8.3f} ms a sub-call "
          f"(3 writes, 1 fsync), {b / a:.1f}x the run")
    f, r = statistics.median(fresh) * 1000, statistics.median(resumed) * 1000
    print(f"{calls} calls + 1 approved, journaled: run afresh (approved live) {f:.2f} ms; "
          f"resumed with {calls} answered from the journal {r:.2f} ms ({r / f:.2f}x)")


async def _approve_request(_execution: ToolExecution, _reason: str | None) -> Approval:
    return Approval(approved=True)


class _Approve:
    request = staticmethod(_approve_request)


_approve = _Approve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=9)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
