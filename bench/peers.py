"""The peers ``python bench/kernel.py`` measures the runtime against, in the same run
(issue [3/5]):

- a stock ipykernel comm round trip: a plain kernel from ipykernel's ``python3`` kernelspec,
  started by jupyter-client's ``AsyncKernelManager`` (none of dsh-jupyter's runtime in it,
  IPC transport as our kernels use). One cell opens a comm (``comm.create_comm``) and awaits
  sequential round trips: it sends ``comm.send({...})`` and awaits a future its ``on_msg``
  handler resolves (ipykernel >= 7.4 delivers comm messages to an awaiting cell), timing
  each with ``time.perf_counter`` in the kernel. The host answers each comm_msg it reads
  from iopub with a comm_msg on the shell channel echoing the data (``AsyncKernelClient``,
  its ``Session``). This is what a comm costs before any of our work, on the same machine
  at the same moment.
- pydantic-monty (pydantic-ai's sandbox, a Rust interpreter of a Python subset), when
  installed (``pip install -e '.[bench]'``): ``AsyncMonty``'s pool of one warm worker, a
  checkout and ``feed_run`` of a program that makes one external call
  (``await echo({"x": 1})``, ``echo`` an async host function as our bindings are), and 100
  sequential external calls in one program timed by the program itself. Its worker is one
  process reused across checkouts (its state reset per checkout), where our warm run takes
  a fresh kernel per run.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
import time
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

STOCK_TARGET = "dsh-bench-echo"
STOCK_CELL = """\
import asyncio, json, time
import comm
_loop = asyncio.get_running_loop()
_waiting = []

def _answered(message):
    _waiting.pop().set_result(message["content"]["data"])

_comm = comm.create_comm(target_name=TARGET)
_comm.on_msg(_answered)

async def _echo(data):
    future = _loop.create_future()
    _waiting.append(future)
    _comm.send(data)
    return await future

sequential = []
for i in range(200):
    started = time.perf_counter()
    assert (await _echo({"i": i})) == {"i": i}
    sequential.append(time.perf_counter() - started)
hundreds = []
for _ in range(5):
    started = time.perf_counter()
    for i in range(100):
        await _echo({"i": i})
    hundreds.append(time.perf_counter() - started)
_comm.close()
print(json.dumps({"sequential": sequential, "hundreds": hundreds}))
""".replace("TARGET", repr(STOCK_TARGET))


async def stock_comm_figures() -> dict[str, list[float]]:
    """Round trips over a stock ipykernel comm, timed in the kernel: ``sequential`` (200
    single calls) and ``hundreds`` (5 runs of 100 sequential calls), in seconds."""
    with tempfile.TemporaryDirectory(prefix="dsh-bench-stock-") as directory:
        manager = AsyncKernelManager(kernel_name="python3", transport="ipc",
                                     ip=f"{directory}/kernel")
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            printed = await _answer_comms(client, client.execute(STOCK_CELL))
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)
    figures = json.loads(printed)
    return {key: [float(x) for x in figures[key]] for key in ("sequential", "hundreds")}


async def _answer_comms(client: AsyncKernelClient, msg_id: str) -> str:
    """Echo every comm_msg of the cell's comm back on the shell channel until the cell is
    done; return what it printed."""
    comm_id = None
    printed: list[str] = []
    while True:
        message = await client.get_iopub_msg(timeout=60)
        kind, content = message["msg_type"], message["content"]
        if kind == "comm_open" and content.get("target_name") == STOCK_TARGET:
            comm_id = content["comm_id"]
        elif kind == "comm_msg" and content["comm_id"] == comm_id:
            client.shell_channel.send(client.session.msg(
                "comm_msg", {"comm_id": comm_id, "data": content["data"]}))
        elif message["parent_header"].get("msg_id") != msg_id:
            continue  # the status messages of each comm_msg the kernel handled
        elif kind == "stream" and content["name"] == "stdout":
            printed.append(content["text"])
        elif kind == "error":
            raise RuntimeError(f"the stock kernel's cell failed: {content['ename']}: "
                               f"{content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(printed)


MONTY_INSTALL = "pip install -e '.[bench]'"
MONTY_WARM = 'await echo({"x": 1})'
MONTY_HUNDREDS = """\
import time
started = time.perf_counter()
for i in range(100):
    await echo({"i": i})
time.perf_counter() - started
"""


def monty_version() -> str | None:
    """pydantic-monty's version, or None when it is not installed."""
    if importlib.util.find_spec("pydantic_monty") is None:
        return None
    import pydantic_monty

    return str(pydantic_monty.__version__)


async def echo(args: Any) -> Any:
    return args


async def monty_figures(samples: int) -> dict[str, list[float]]:
    """pydantic-monty, warm: ``warm`` (checkout + ``feed_run`` of one external call, timed
    on the host) and ``hundreds`` (100 sequential external calls, timed in the program),
    in seconds."""
    from pydantic_monty import AsyncMonty

    warm: list[float] = []
    hundreds: list[float] = []
    async with AsyncMonty(min_processes=1, max_processes=1) as pool:
        for sample in range(samples + 1):
            started = time.perf_counter()
            async with pool.checkout() as session:
                value = await session.feed_run(MONTY_WARM, external_lookup={"echo": echo})
            elapsed = time.perf_counter() - started
            assert value == {"x": 1}, value
            if sample:  # the first waits for the worker to start
                warm.append(elapsed)
        for _ in range(5):
            async with pool.checkout() as session:
                took = await session.feed_run(MONTY_HUNDREDS, external_lookup={"echo": echo})
            hundreds.append(float(took))
    return {"warm": warm, "hundreds": hundreds}
