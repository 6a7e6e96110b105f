"""Where a warm run's time goes, and one tool call's round trip: ``python bench/kernel.py
--breakdown`` (issue [3/5], the profile before the speed work).

Measured from both ends on one clock (host and kernel share the machine's ``time.time()``):
the host's steps are timed by wrapping the runtime's own seams for this benchmark only
(the kernel source's ``acquire``, the channels' ``execute`` and ``send_comm``, the
kernel's ``close``), the kernel's by the program itself (``time.time()`` as its first and
last statement, and around each call). Nothing in the package is changed to be measured.

A warm run, from ``runtime.run`` to its result:

- pool checkout: the kernel source hands out a pooled kernel (alive and pristine checks);
- host, to the cell sent: the run's lifecycle, the call transport, the program's cell;
- cell sent -> program's first line: zmq, ipykernel's dispatch, the cell compiled, the
  in-kernel runtime building ``tools`` and compiling the program;
- the program itself (here: one print and one tool call);
- program's last line -> result on the host: the done message, the run's end (idle,
  drain), the result built and escaped;
- after the result, off the critical path: the kernel killed, reaped, workspace removed.

One call's round trip, from ``await tools.echo(...)`` to its value in the program:

- kernel -> host binding: the in-kernel client encodes, the comm sends, zmq, the host
  verifies and decodes, the call server dispatches to the binding;
- host binding -> reply sent: the binding runs (an echo) and the reply is framed;
- reply sent -> program resumes: zmq, ipykernel's comm dispatch, the client decodes and
  resolves the call's future.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.kernel.confine.sandbox import SandboxConfig
from dsh_jupyter.kernel.run.live_kernel import LiveKernel
from dsh_jupyter.kernel.run.sources import FreshKernels
from dsh_jupyter.kernel.transport.channels import BaseChannels
from dsh_jupyter.runtime import FunctionBindings, RunRequest

WARM = """\
import time as _t
started = _t.time()
print("hello")
value = await tools.echo({"x": 1})
return {"started": started, "ended": _t.time()}
"""

CALLS = 30
ROUND_TRIPS = f"""\
import time as _t
marks = []
for i in range({CALLS}):
    before = _t.time()
    await tools.echo({{"i": i}})
    marks.append([before, _t.time()])
return marks
"""


class Marks:
    """Host-side timestamps of one run, by step."""

    def __init__(self) -> None:
        self.acquired: list[float] = []
        self.sent: list[float] = []
        self.replied: list[float] = []
        self.bound: list[float] = []
        self.closed: list[float] = []

    def clear(self) -> None:
        for values in vars(self).values():
            values.clear()


@contextlib.contextmanager
def watched(marks: Marks) -> Iterator[None]:
    """Wrap the seams a run passes through (for this benchmark only)."""
    acquire, execute, send_comm, close = (FreshKernels.acquire, BaseChannels.execute,
                                          BaseChannels.send_comm, LiveKernel.close)

    async def timed_acquire(self: Any, *args: Any) -> Any:
        lease = await acquire(self, *args)
        marks.acquired.append(time.time())
        return lease

    def timed_execute(self: Any, code: str) -> str:
        marks.sent.append(time.time())
        return execute(self, code)

    def timed_send_comm(self: Any, *args: Any, **kwargs: Any) -> None:
        marks.replied.append(time.time())
        send_comm(self, *args, **kwargs)

    async def timed_close(self: Any) -> None:
        started = time.time()
        await close(self)
        marks.closed.append(time.time() - started)

    with contextlib.ExitStack() as stack:
        for owner, name, wrapper in ((FreshKernels, "acquire", timed_acquire),
                                     (BaseChannels, "execute", timed_execute),
                                     (BaseChannels, "send_comm", timed_send_comm),
                                     (LiveKernel, "close", timed_close)):
            stack.enter_context(mock.patch.object(owner, name, wrapper))
        yield


def row(label: str, values: list[float], total: float | None = None) -> None:
    median = statistics.median(values) * 1000
    share = f"{median / total * 100:5.1f} %" if total else ""
    print(f"  {label:58s} {median:8.3f} ms  {share}")


async def warm_breakdown(samples: int, sandbox: SandboxConfig | None, label: str) -> None:
    marks = Marks()
    steps: dict[str, list[float]] = {name: [] for name in (
        "pool checkout", "host, to the cell sent", "cell sent -> program's first line",
        "the program (a print and one tool call)", "program's last line -> result on the host",
        "whole run")}
    closes: list[float] = []

    async def bound(args: JsonValue) -> JsonValue:
        return args

    config = KernelRuntimeConfig(pool_size=1, sandbox=sandbox)
    async with KernelRuntime(config) as runtime:
        assert runtime._pool is not None
        with watched(marks):
            for _ in range(samples + 1):  # the first warms the fork server's caches
                await runtime._pool.wait_filled()
                marks.clear()
                started = time.time()
                result = await runtime.run(RunRequest(WARM, FunctionBindings({"echo": bound})))
                ended = time.time()
                assert result.failure is None and isinstance(result.value, dict), result.failure
                assert result.facts["kernel.source"] == "pool", result.facts
                first, last = result.value["started"], result.value["ended"]
                assert isinstance(first, float) and isinstance(last, float)
                acquired, sent = marks.acquired[0], marks.sent[0]
                steps["pool checkout"].append(acquired - started)
                steps["host, to the cell sent"].append(sent - acquired)
                steps["cell sent -> program's first line"].append(first - sent)
                steps["the program (a print and one tool call)"].append(last - first)
                steps["program's last line -> result on the host"].append(ended - last)
                steps["whole run"].append(ended - started)
                await runtime._pool.wait_filled()
                closes.extend(marks.closed)
    total = statistics.median(steps["whole run"]) * 1000
    print(f"A warm run_code, {label} (median of {samples}; share of the whole run)")
    for name, values in steps.items():
        row(name, values, total if name != "whole run" else None)
    if closes:
        row("after the result: kill, reap, remove the workspace", closes)


async def round_trip_breakdown(samples: int, sandbox: SandboxConfig | None,
                               label: str) -> None:
    marks = Marks()
    there: list[float] = []
    host: list[float] = []
    back: list[float] = []
    whole: list[float] = []

    async def bound(args: JsonValue) -> JsonValue:
        marks.bound.append(time.time())
        return args

    config = KernelRuntimeConfig(pool_size=1, sandbox=sandbox)
    async with KernelRuntime(config) as runtime:
        with watched(marks):
            for _ in range(samples):
                marks.clear()
                result = await runtime.run(RunRequest(ROUND_TRIPS,
                                                      FunctionBindings({"echo": bound})))
                assert result.failure is None and isinstance(result.value, list), result.failure
                replies = marks.replied[:CALLS]  # the first comm messages are the replies
                assert len(replies) == CALLS == len(marks.bound), (len(replies), marks.bound)
                for index, pair in enumerate(result.value[1:], start=1):  # the first warms up
                    assert isinstance(pair, list)
                    before, after = float(pair[0]), float(pair[1])  # type: ignore[arg-type]
                    there.append(marks.bound[index] - before)
                    host.append(replies[index] - marks.bound[index])
                    back.append(after - replies[index])
                    whole.append(after - before)
    total = statistics.median(whole) * 1000
    print(f"One tool call's round trip, {label} (median of {len(whole)}; share of the trip)")
    row("kernel -> host binding (encode, comm, zmq, verify, dispatch)", there, total)
    row("host binding -> reply sent (an echo, the reply framed)", host, total)
    row("reply sent -> program resumes (zmq, comm dispatch, decode)", back, total)
    row("whole round trip", whole)


async def breakdown(samples: int, modes: dict[str, SandboxConfig | None]) -> None:
    for label, sandbox in modes.items():
        await warm_breakdown(samples, sandbox, label)
    print()
    for label, sandbox in modes.items():
        await round_trip_breakdown(max(3, samples // 5), sandbox, label)
