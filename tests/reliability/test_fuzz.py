"""A hostile kernel, fuzzed: random and malformed comm traffic sent from inside the program.

Each hypothesis example is one program in one fresh kernel. Between real SDK calls (whose
answers the program checks itself) it sends, on the trusted comm, on a rogue comm and as
raw signed iopub frames: values of the wrong type, calls with broken ids, names and
arguments, duplicate and replayed ids, huge payloads, deeply nested JSON, invalid UTF-8,
lone surrogates, NaN, oversized integers; and, from a thread, more of it after the run has
settled. The host must answer every valid call correctly, end the run well inside the
wall budget, keep the settlement rules, call no binding after the run, and leak nothing.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import Harness, code_registry, json_tool, returned_by, run_code, sized

from dsh_jupyter import ToolRunContext

pytestmark = [pytest.mark.kernel]

WALL_SECONDS = 20.0
KiB = 1024
EXAMPLES = sized(default=20, short=40, long=400)

leaves = (st.none() | st.booleans() | st.integers(-(2**53), 2**53)
          | st.floats(allow_nan=False, allow_infinity=False).filter(
              lambda x: not (x == 0 and math.copysign(1.0, x) < 0))
          | st.text(max_size=20))
json_values = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)

# Hostile ids never look like the kernel's own (decimal) ids, except on purpose ("replay").
hostile_ids = (st.text(max_size=70).map(lambda s: "h" + s) | st.integers() | st.none()
               | st.just("") | st.lists(st.integers(), max_size=2)
               | st.sampled_from(["h-dup-1", "h-dup-2"]))
names = (st.sampled_from(["echo", "slow", "run_code", "__import__", "ECHO", "echo "])
         | st.text(max_size=300) | st.integers() | st.none())


def _drop(message: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in keys}


calls = st.builds(
    _drop,
    st.fixed_dictionaries({"kind": st.just("call"), "id": hostile_ids, "name": names,
                           "args": json_values | json_objects},
                          optional={"extra": json_values}),
    st.frozensets(st.sampled_from(["id", "name", "args"]), max_size=1))


def _ends_the_run(message: object) -> bool:
    """A well-formed ``done`` is the program's own result: the fuzzer sends those only
    after the run has settled."""
    return (isinstance(message, dict) and message.get("kind") == "done"
            and (message.get("ok") is True or (
                message.get("ok") is False
                and message.get("error") in ("exception", "invalid-output", "output-limit"))))


others = st.fixed_dictionaries(
    {"kind": st.sampled_from(["result", "done", "carrier", "hello", "CALL"])
     | st.text(max_size=10)},
    optional={"ok": json_values, "id": hostile_ids, "value": json_values,
              "error": st.sampled_from(["exception", "nope"]), "path": st.text(max_size=10)},
).filter(lambda m: not _ends_the_run(m))

RAW_TEMPLATES = {
    "lone surrogate": b'{"kind": "call", "id": "hsur", "name": "echo", "args": {"s": "\\ud800"}}',
    "nan": b'{"kind": "call", "id": "hnan", "name": "echo", "args": {"x": NaN}}',
    "huge int": b'{"kind": "call", "id": "hint", "name": "echo", "args": {"x": ' + b"9" * 5000
                + b"}}",
    "duplicate keys": b'{"kind": "done", "kind": "call", "id": "hdk", "name": "echo", "args": {}}',
}


def _invalid_utf8(junk: bytes) -> bytes:
    text = junk.replace(b'"', b"").replace(b"\\", b"") + b"\xff"
    return b'{"kind": "call", "id": "hutf", "name": "echo", "args": {"s": "' + text + b'"}}'


raw_payloads = (st.integers(1_000, 200_000).map(lambda d: b"[" * d + b"]" * d)
                | st.binary(min_size=1, max_size=40).map(_invalid_utf8)
                | st.sampled_from(sorted(RAW_TEMPLATES.values()))
                | st.binary(max_size=60))

actions = st.lists(st.one_of(
    st.tuples(st.just("send"), st.lists(calls | others | json_values, min_size=5, max_size=40)),
    st.tuples(st.just("raw"), st.lists(raw_payloads, min_size=1, max_size=6)),
    st.tuples(st.just("raw-other-comm"), st.sampled_from(sorted(RAW_TEMPLATES.values()))),
    st.tuples(st.just("rogue"), st.lists(calls, min_size=1, max_size=5)),
    st.tuples(st.just("big"), st.integers(64 * KiB, 1536 * KiB), st.sampled_from(["echo", "nope"])),
    st.tuples(st.just("replay"), st.sampled_from(["echo", "slow"])),
    st.tuples(st.just("valid"), json_objects),
    st.tuples(st.just("gather"), st.lists(json_objects, min_size=2, max_size=5)),
    st.tuples(st.just("yield")),
), min_size=8, max_size=60)
late_messages = st.lists(calls | others | json_values, max_size=30)

PROGRAM = """\
import sys, threading, time
from comm import create_comm

inkernel = sys.modules["_dsh_jupyter_inkernel"]
kernel = get_ipython().kernel
trusted = next(c for c in kernel.comm_manager.comms.values()
               if c.target_name == "dsh_jupyter.tools")

sent = [0]

def send(data, comm=trusted):
    sent[0] += 1
    try:
        comm.send(data)
    except Exception:
        pass  # what the kernel cannot even encode never leaves it

def raw(payload, comm_id=trusted.comm_id):
    sent[0] += 1
    content = b'{{"comm_id": "' + comm_id.encode() + b'", "data": ' + payload + b'}}'
    kernel.session.send(kernel.iopub_socket, "comm_msg", content=content)

ACTIONS = {actions!r}
LATE = {late!r}
answers, expected, rogue, valid_calls = [], [], None, 0
for action in ACTIONS:
    kind = action[0]
    if kind == "send":
        for message in action[1]:
            send(message)
    elif kind == "raw":
        for payload in action[1]:
            raw(payload)
    elif kind == "raw-other-comm":
        raw(action[1], comm_id="not-our-comm")
    elif kind == "rogue":
        rogue = rogue or create_comm(target_name="dsh_jupyter.tools", data={{"kind": "hello"}})
        for message in action[1]:
            send(message, rogue)
    elif kind == "big":
        send({{"kind": "call", "id": "hbig", "name": action[2], "args": "x" * action[1]}})
    elif kind == "replay" and valid_calls:
        send({{"kind": "call", "id": str(valid_calls), "name": action[1], "args": {{}}}})
    elif kind == "valid":
        valid_calls += 1
        expected.append(action[1])
        answers.append(await tools.echo(action[1]))
    elif kind == "gather":
        valid_calls += len(action[1])
        expected.extend(action[1])
        answers.extend(await asyncio.gather(*(tools.echo(args) for args in action[1])))
    elif kind == "yield":
        await asyncio.sleep(0)

returned = threading.Event()
real_done = inkernel.runtime.client.done

def done_then_flag(message, text=None):
    real_done(message, text)
    returned.set()

inkernel.runtime.client.done = done_then_flag

def after_return():
    returned.wait()
    for message in LATE:
        send(message)
    send({{"kind": "done", "ok": True, "value": "forged"}})
    send({{"kind": "call", "id": "hlate", "name": "echo", "args": {{"late": True}}}})

threading.Thread(target=after_return, daemon=True).start()
wrong = [i for i, (a, e) in enumerate(zip(answers, expected)) if a != e]
return {{"answered": len(answers), "wrong": wrong, "hostile": sent[0]}}
"""


class Tools:
    def __init__(self) -> None:
        self.last_call = 0.0

    def definitions(self) -> tuple[Any, ...]:
        loop = asyncio.get_running_loop()

        async def echo(args: Any, _ctx: ToolRunContext) -> Any:
            self.last_call = loop.time()
            return dict(args)

        async def slow(args: Any, ctx: ToolRunContext) -> Any:
            self.last_call = loop.time()
            await asyncio.sleep(0.05)
            return dict(args)

        return json_tool("echo", echo), json_tool("slow", slow)


@pytest.mark.timeout(60 + EXAMPLES * 10)
@settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(program_actions=actions, late=late_messages)
async def test_hostile_kernel(harness: Harness, program_actions: list[tuple[Any, ...]],
                              late: list[Any]) -> None:
    runtime = harness.runtimes[0] if harness.runtimes else await harness.runtime(
        wall_seconds=WALL_SECONDS, max_call_bytes=256 * KiB, max_output_bytes=1024 * KiB)
    tools = Tools()
    registry, log = code_registry(runtime, *tools.definitions())
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_code(registry, PROGRAM.format(actions=program_actions, late=late))
    returned = loop.time()
    assert returned - started < WALL_SECONDS, "the host took the whole wall budget"
    valid = sum(1 for a in program_actions if a[0] == "valid") + sum(
        len(a[1]) for a in program_actions if a[0] == "gather")
    assert result.error is None, result.error
    assert isinstance(result.value, dict)
    answer = dict(returned_by(result))
    hostile = answer.pop("hostile")
    assert (result.value["logs"], answer) == ([], {"answered": valid, "wrong": []})
    log.settlement()
    await asyncio.sleep(0.05)  # late messages are in flight now: none may reach a binding
    assert tools.last_call <= returned, "a binding was called after the run returned"
    harness.figures.add("messages fuzzed", hostile + len(late) + 2)  # + the late ones
    harness.figures.add("fuzz programs")


async def test_fuzz_leaves_nothing_behind(harness: Harness) -> None:
    """The fuzz test shares one runtime across examples; this checks a short fuzzed
    sequence on its own runtime closes clean (the harness checks every test's too)."""
    runtime = await harness.runtime(wall_seconds=WALL_SECONDS, max_call_bytes=256 * KiB)
    tools = Tools()
    registry, log = code_registry(runtime, *tools.definitions())
    program = PROGRAM.format(actions=[("send", [{"kind": "call"}]), ("raw", [b"[" * 50_000]),
                                      ("valid", {"a": 1}), ("big", 300 * KiB, "echo")],
                             late=[{"kind": "call", "id": "h1", "name": "echo", "args": {}}])
    result = await run_code(registry, program)
    assert result.value == {"logs": [], "result": {"answered": 1, "wrong": [], "hostile": 3}}
    log.settlement()
    assert not await harness.finish()


async def test_unencodable_tool_value_is_answered(harness: Harness) -> None:
    """Regression: a tool value holding a lone surrogate could not be encoded for the
    comm, the reply was dropped, and the program waited for it until the wall budget."""
    async def weird(_args: Any, _ctx: ToolRunContext) -> Any:
        return {"s": "\ud800"}

    runtime = await harness.runtime(wall_seconds=WALL_SECONDS)
    registry, log = code_registry(runtime, json_tool("weird", weird))
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_code(registry, "try:\n    await tools.weird({})\nexcept ToolCallError as "
                                      "error:\n    return str(error)")
    assert loop.time() - started < 5
    assert result.error is None, result.error
    assert "not valid Unicode" in str(result.value)
    assert log.settlement().codes == {"run:code:1": None}
    assert not await harness.finish()
