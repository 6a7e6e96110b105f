"""A warm run is one execute_request: a kernel from the pool was prepared while it waited
(the in-kernel package, the tools comm, the carrier), so what a run sends its kernel is
the program's cell and the replies to its calls, nothing else (issue [3/5])."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kernel_support import RuntimeFactory

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel.transport.channels import BaseChannels
from dsh_jupyter.runtime import FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

PROGRAM = 'print("calling")\nreturn await tools.echo({"x": 1})'


async def echo(args: JsonValue) -> JsonValue:
    return args


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, str]]]:
    """Every execute_request any kernel channel sends, as (channel id, code)."""
    sent: list[tuple[int, str]] = []
    execute = BaseChannels.execute

    def counting(self: Any, code: str) -> str:
        sent.append((id(self), code))
        return execute(self, code)

    monkeypatch.setattr(BaseChannels, "execute", counting)
    yield sent


@pytest.mark.parametrize("carrier", ["comm", "socket"])
async def test_a_warm_run_sends_its_kernel_one_execute_request(
        carrier: str, make_runtime: RuntimeFactory, executed: list[tuple[int, str]]) -> None:
    runtime = await make_runtime(pool_size=1, carrier=carrier)
    assert runtime._pool is not None
    await runtime._pool.wait_filled()
    assert runtime._pool.ready_count == 1
    executed.clear()  # the pooled kernel's own preparation happened before the run
    result = await runtime.run(RunRequest(PROGRAM, FunctionBindings({"echo": echo})))
    assert result.failure is None and result.value == {"x": 1}, result.failure
    assert result.facts["kernel.source"] == "pool"
    ran = {channel for channel, code in executed if "tools.echo" in code}
    assert len(ran) == 1, executed  # one kernel ran the program ...
    sent_to_it = [code for channel, code in executed if channel in ran]
    assert len(sent_to_it) == 1, sent_to_it  # ... and was sent nothing else to execute


STACK = """\
import inspect
functions = [frame.function for frame in inspect.stack()]
return {"functions": functions, "ipython": type(get_ipython()).__name__}
"""


async def test_a_run_cell_skips_ipythons_cell_machinery(make_runtime: RuntimeFactory) -> None:
    """The kernel runs the host's program cell itself (the shortcut of ``inkernel/shortcuts``):
    none of IPython's run_cell is on the program's stack, and the program still sees what a
    cell sees (``get_ipython``)."""
    runtime = await make_runtime(pool_size=1)
    result = await runtime.run(RunRequest(STACK, FunctionBindings({})))
    assert result.failure is None and isinstance(result.value, dict), result.failure
    functions = result.value["functions"]
    assert isinstance(functions, list)
    assert not {"run_cell_async", "run_cell", "run_code", "run_ast_nodes"} & set(functions)
    assert result.value["ipython"] == "ZMQInteractiveShell"


CALLS = """\
kernel = get_ipython().kernel
comm = next(c for c in kernel.comm_manager.comms.values()
            if c.target_name == "dsh_jupyter.tools")
dispatched = []
comm.on_msg(dispatched.append)  # what ipykernel's comm dispatch would deliver
values = [await tools.echo({"i": i}) for i in range(20)]
return {"values": values, "dispatched": len(dispatched)}
"""


async def test_call_replies_skip_ipykernels_dispatch(make_runtime: RuntimeFactory) -> None:
    """A reply to a call reaches the program from ipykernel's shell-channel thread, verified
    there, without the forwarding to the main thread, a second parse and check, and the
    comm manager's dispatch: the tools comm's ``on_msg`` handlers never see it (through
    them, the calls would wait for replies the program's handler swallowed)."""
    runtime = await make_runtime(pool_size=1, wall_seconds=10)
    result = await runtime.run(RunRequest(CALLS, FunctionBindings({"echo": echo})))
    assert result.failure is None and isinstance(result.value, dict), result.failure
    assert result.value == {"values": [{"i": i} for i in range(20)], "dispatched": 0}
