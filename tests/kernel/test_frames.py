"""Large values as frames: the kernel's encoder and the host's builder agree exactly, the
builder refuses whatever a hostile kernel could send, and real runs move large arguments
and results through them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_support import Recorder, RuntimeFactory, run
from property_support import examples

from dsh_jupyter.json_value import FrozenDict, FrozenList
from dsh_jupyter.kernel.inkernel import frames as inkernel_frames
from dsh_jupyter.kernel.transport.frames import FrameError, FrameTooLarge, ValueBuilder


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def rebuilt(value: Any, limit: int = 1 << 30) -> ValueBuilder:
    builder = ValueBuilder(limit)
    for frame in inkernel_frames.frame_texts(value):
        builder.feed(frame)
    return builder


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: str(x) != "-0.0"),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(
        st.text(max_size=10), children, max_size=8),
    max_leaves=60)


@settings(max_examples=examples(200), deadline=None)
@given(JSON)
def test_any_value_round_trips_with_its_exact_size(value: Any) -> None:
    builder = rebuilt(value)
    assert builder.complete and builder.result() == value
    assert builder.size == len(compact(value).encode())


@pytest.mark.parametrize("value", [
    list(range(200_000)),
    {f"key-{i}": {"i": i, "text": "x" * 30} for i in range(20_000)},
    "é\"\\\n" * 300_000,
    {"k" * 400_000: ["v" * 300_000, {"deep": [[[[list(range(70_000))]]]]}], "": []},
    [[], {}, "", [[[]]], {"a": {}}] * 40_000,
], ids=["numbers", "objects", "escapes", "long-key-and-nesting", "empties"])
def test_large_values_round_trip_in_bounded_frames(value: Any) -> None:
    frames = inkernel_frames.frame_texts(value)
    assert len(frames) > 1
    assert max(len(frame.encode()) for frame in frames) <= inkernel_frames.FRAME_BYTES * 2
    builder = rebuilt(value)
    assert builder.result() == value
    assert builder.size == len(compact(value).encode())
    result = builder.result()
    assert isinstance(result, FrozenList | FrozenDict | str)


@pytest.mark.parametrize(("frames", "problem"), [
    (['[["c"]]'], "no open container"),
    (['[["v", 1], ["v", 2]]'], "after the value was complete"),
    (['[["o"], ["v", 1]]'], "without its key"),
    (['[["o"], ["k", "a"], ["v", 1], ["k", "a"]]'], "duplicate key"),
    (['[["o"], ["m", {"a": 1}], ["m", {"a": 2}]]'], "duplicate key"),
    (['[["a"], ["m", {"a": 1}]]'], "outside an object"),
    (['[["o"], ["e", [1]]]'], "outside an array"),
    (['[["s", "ab"], ["v", 1]]'], "left unfinished"),
    (['[["x"]]'], "unknown or malformed"),
    (['[["v"]]'], "unknown or malformed"),
    (["[NaN]"], "not JSON"),
    (["{}"], "array of operations"),
    (['[["v", 1.0e999]]'], "not lossless JSON"),
    (['[["v", -0.0]]'], "not lossless JSON"),
    ([1], "string of JSON"),
], ids=lambda item: str(item)[:40])
def test_hostile_frames_are_refused(frames: list[Any], problem: str) -> None:
    builder = ValueBuilder(1 << 20)
    with pytest.raises(FrameError, match=problem):
        for frame in frames:
            builder.feed(frame)


def test_nesting_and_size_are_bounded() -> None:
    builder = ValueBuilder(1 << 20)
    with pytest.raises(FrameError, match="nested more than 500"):
        builder.feed(json.dumps([["a"]] * 501))
    small = ValueBuilder(100)
    with pytest.raises(FrameTooLarge):
        for frame in inkernel_frames.frame_texts(list(range(1000))):
            small.feed(frame)
    unfinished = ValueBuilder(1 << 20)
    unfinished.feed('[["a"], ["e", [1, 2]]]')
    with pytest.raises(FrameError, match="ended before the value did"):
        unfinished.result()


LARGE = {
    "numbers": ("return list(range(1_000_000))", list(range(1_000_000))),
    "text": ("return 'é' * 2_000_000", "é" * 2_000_000),
    "objects": ("return {str(i): [i, 'x' * 10] for i in range(100_000)}",
                {str(i): [i, "x" * 10] for i in range(100_000)}),
}


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(LARGE))
async def test_large_results_arrive_as_frames(make_runtime: RuntimeFactory, name: str) -> None:
    program, expected = LARGE[name]
    runtime = await make_runtime()
    result = await run(runtime, program)
    assert result.failure is None, result.failure
    assert result.value == expected
    assert isinstance(result.value, FrozenList | FrozenDict | str)


@pytest.mark.kernel
async def test_large_arguments_arrive_as_frames(make_runtime: RuntimeFactory,
                                                recorder: Recorder) -> None:
    runtime = await make_runtime(carrier="socket")
    program = """\
big = {"rows": [{"i": i, "name": f"row {i}"} for i in range(50_000)], "k" * 300_000: 1}
answer = await tools.echo(big)
return [len(answer["args"]["rows"]), answer["args"]["rows"][-1], len(answer["args"])]
"""
    result = await run(runtime, program, {"echo": recorder.binding("echo")})
    assert result.failure is None, result.failure
    assert result.value == [50_000, {"i": 49_999, "name": "row 49999"}, 2]


@pytest.mark.kernel
async def test_framed_values_keep_the_limits(make_runtime: RuntimeFactory,
                                             recorder: Recorder) -> None:
    runtime = await make_runtime(max_output_bytes=1_000_000, max_call_bytes=500_000)
    too_big = await run(runtime, "return list(range(300_000))")
    assert too_big.failure is not None and too_big.failure.kind == "output-limit"
    program = """\
try:
    await tools.echo({"data": list(range(200_000))})
except ToolCallError as error:
    return str(error)
"""
    refused = await run(runtime, program, {"echo": recorder.binding("echo")})
    assert refused.failure is None, refused.failure
    assert "passed the 500000 byte limit" in str(refused.value)
    assert recorder.calls == []


@pytest.mark.kernel
async def test_hostile_frames_from_a_program(make_runtime: RuntimeFactory,
                                             recorder: Recorder) -> None:
    """Frames a program forges itself: a broken call frame fails that call; a broken result
    frame fails the run as invalid-output, in one line."""
    runtime = await make_runtime()
    program = """\
import sys
bridge = sys.modules["_dsh_jupyter_inkernel"].runtime.client
bridge._send({"kind": "frame", "for": "call", "id": "x1", "text": '[["c"]]'})
bridge._send({"kind": "call", "id": "x1", "name": "echo", "framed": True})
bridge._send({"kind": "call", "id": "x2", "name": "echo", "framed": True})
bridge._comm_send({"kind": "frame", "for": "done", "text": '[["a"], ["v", 1]]'})
bridge._comm_send({"kind": "done", "ok": True, "framed": True})
await asyncio.sleep(10)
"""
    result = await run(runtime, program, {"echo": recorder.binding("echo")})
    assert result.failure is not None and result.failure.kind == "invalid-output"
    assert result.failure.message == ("the kernel sent a malformed return value: the value's "
                                      "frames ended before the value did")
    assert recorder.calls == []
