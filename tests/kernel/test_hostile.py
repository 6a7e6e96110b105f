"""A hostile kernel: traffic sent from inside the program never crashes or hangs the host."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kernel_support import Recorder, RuntimeFactory, run

from dsh_jupyter.json_value import JsonValue

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

HOSTILE = """\
import sys, threading, time
from comm import create_comm

inkernel = sys.modules["_dsh_jupyter_inkernel"]
kernel = get_ipython().kernel
trusted = next(c for c in kernel.comm_manager.comms.values()
               if c.target_name == "dsh_jupyter.tools")
replies = []
receive = inkernel.runtime.client.receive

def spy(data):  # what the host answers on the tools comm
    replies.append(data)
    receive(data)

inkernel.runtime.client.receive = spy
send = trusted.send

# A second comm with our target is not trusted: its call is never answered.
rogue = create_comm(target_name="dsh_jupyter.tools", data={"kind": "hello"})
rogue.send({"kind": "call", "id": "rogue", "name": "echo", "args": {}})

for junk in ["junk", [1, 2, 3], None, {"kind": "nope"}, {"kind": "call"},
             {"kind": "call", "id": 5, "name": "echo", "args": {}},
             {"kind": "call", "id": "x" * 1000, "name": "echo", "args": {}},
             {"kind": "result", "id": "1", "ok": True, "value": 1},
             {"kind": "done", "ok": "maybe"}]:
    send(junk)
send({"kind": "call", "id": "no-args", "name": "echo"})
send({"kind": "call", "id": "unknown", "name": "rm -rf", "args": {}})
send({"kind": "call", "id": "big", "name": "echo", "args": "x" * 1_500_000})  # < 2 MiB
send({"kind": "call", "id": "dup", "name": "slow", "args": {"n": 1}})
send({"kind": "call", "id": "dup", "name": "slow", "args": {"n": 2}})

# Unsigned frames straight onto iopub, and a signed message the host cannot parse.
kernel.iopub_socket.send_multipart([b"<IDS|MSG>", b"bad", b"{}", b"{}", b"{}", b"{}"])
nested = b"[" * 100000 + b"]" * 100000
deep = b'{"comm_id": "' + trusted.comm_id.encode() + b'", "data": ' + nested + b"}"
kernel.session.send(kernel.iopub_socket, "comm_msg", content=deep)

value = await tools.echo({"still": "answered"})
await tools.slow({"n": 3})

returned = threading.Event()
real_done = inkernel.runtime.client.done

def done_then_flag(message, text=None):
    real_done(message, text)
    returned.set()

inkernel.runtime.client.done = done_then_flag

def after_return():
    returned.wait()
    for i in range(50):
        send({"kind": "call", "id": f"late-{i}", "name": "echo", "args": {"late": i}})
        send({"kind": "done", "ok": True, "value": "forged"})
        time.sleep(0.01)

threading.Thread(target=after_return, daemon=True).start()
by_id = {}
for reply in replies:
    if isinstance(reply, dict):
        by_id.setdefault(reply.get("id"), []).append(reply)
return {"value": value, "replies": {k: v for k, v in by_id.items() if k is not None}}
"""


async def test_hostile_traffic_from_the_kernel(make_runtime: RuntimeFactory,
                                               recorder: Recorder) -> None:
    runtime = await make_runtime(max_call_bytes=1024 * 1024)
    bindings = {"echo": recorder.binding("echo"), "slow": recorder.binding("slow", delay=0.2)}
    result = await run(runtime, HOSTILE, bindings)
    assert result.failure is None, result.failure
    assert isinstance(result.value, dict)
    assert result.value["value"] == {"tool": "echo", "args": {"still": "answered"}}
    replies: Any = result.value["replies"]
    assert replies["no-args"][0]["ok"] is False
    assert "malformed" in replies["no-args"][0]["message"]
    assert replies["unknown"][0]["ok"] is False
    assert "known tools: 'echo', 'slow'" in replies["unknown"][0]["message"]
    assert "over the 1048576 byte limit" in replies["big"][0]["message"]
    assert len(replies["dup"]) == 1  # the duplicate id was dropped
    assert "rogue" not in replies
    calls_at_return = len(recorder.calls)
    await asyncio.sleep(0.5)
    assert len(recorder.calls) == calls_at_return  # no binding called after the run returned
    assert not any(isinstance(args, dict) and "late" in args for _, args in recorder.calls)
    again = await run(runtime, "return await tools.echo({'n': 1})", bindings)
    assert again.value == {"tool": "echo", "args": {"n": 1}}


async def test_message_over_the_size_cap(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(max_output_bytes=256 * 1024, max_call_bytes=256 * 1024)
    program = """\
import sys
print("before")
sys.stdout.flush()
sys.modules["_dsh_jupyter_inkernel"].runtime.client._send(
    {"kind": "call", "id": "1", "name": "x", "args": "y" * 10_000_000})
await asyncio.sleep(30)  # the kernel's loop must run to write to the socket
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"
    assert result.logs == ("before",)
    assert (await run(runtime, "return 2")).value == 2


async def test_forged_done_is_just_a_result(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    program = """\
kernel = get_ipython().kernel
comm_id = next(c.comm_id for c in kernel.comm_manager.comms.values()
               if c.target_name == "dsh_jupyter.tools")
raw = '{"comm_id": "%s", "data": {"kind": "done", "ok": true, "value": NaN}}' % comm_id
kernel.session.send(kernel.iopub_socket, "comm_msg", content=raw.encode())
import time
time.sleep(30)
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "invalid-output"


async def test_binding_sees_only_json(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime()
    seen: list[JsonValue] = []

    async def spy(args: JsonValue) -> JsonValue:
        seen.append(args)
        return None

    program = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
bridge._send({"kind": "call", "id": "neg", "name": "spy", "args": -0.0})
return await tools.spy({"ok": True})
"""
    result = await run(runtime, program, {"spy": spy})
    assert result.failure is None
    assert seen == [{"ok": True}]


SOCKET_HOSTILE = """\
import sys, json, socket
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
send = bridge._send
assert send is not bridge._comm_send, "the socket carrier is in use"
for junk in ["junk", [1], {"kind": "nope"}, {"kind": "call", "id": "no-args", "name": "echo"},
             {"kind": "call", "id": "unknown", "name": "nope", "args": {}}]:
    send(junk)
import os
workspace = os.path.dirname(os.environ["HOME"])
assert not os.path.exists(os.path.join(workspace, "tools.sock")), "the listener is gone"
try:
    send({"kind": "call", "id": "nan", "name": "echo", "args": float("nan")})
except ValueError:
    pass
return await tools.echo({"still": "answered"})
"""


async def test_hostile_traffic_over_the_socket(make_runtime: RuntimeFactory,
                                               recorder: Recorder) -> None:
    runtime = await make_runtime(carrier="socket")
    result = await run(runtime, SOCKET_HOSTILE, {"echo": recorder.binding("echo")})
    assert result.failure is None, result.failure
    assert result.value == {"tool": "echo", "args": {"still": "answered"}}
    assert [name for name, _ in recorder.calls] == ["echo"]


async def test_oversized_line_over_the_socket(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(carrier="socket", max_output_bytes=256 * 1024,
                                 max_call_bytes=256 * 1024)
    program = """\
import sys
sys.modules["_dsh_jupyter_inkernel"].runtime.client._send(
    {"kind": "call", "id": "1", "name": "x", "args": "y" * 10_000_000})
await asyncio.sleep(30)  # the kernel's loop must run to write to the socket
"""
    result = await run(runtime, program)
    assert result.failure is not None and result.failure.kind == "output-limit"


async def test_kernel_drops_the_socket_mid_run(make_runtime: RuntimeFactory,
                                               recorder: Recorder) -> None:
    runtime = await make_runtime(carrier="socket")
    program = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
first = await tools.echo({"over": "socket"})
bridge._carrier.cancel()  # closes the socket: the kernel falls back to the comm
await asyncio.wait([bridge._carrier])  # once the carrier task has ended
second = await tools.echo({"over": "comm"})
return [first["args"], second["args"]]
"""
    result = await run(runtime, program, {"echo": recorder.binding("echo")})
    assert result.failure is None, result.failure
    assert result.value == [{"over": "socket"}, {"over": "comm"}]
