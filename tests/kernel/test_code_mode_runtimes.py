"""Code Mode's rules on both runtimes (the in-process one and a real kernel): scheduling
of sub-calls, failures and events, aborts and cancellation, the ``tools`` namespace, and a
plot reaching the model. The rules that need no kernel are in
tests/unit/codemode/test_code_mode.py."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from code_mode_support import code_registry, echo, run

from dsh_jupyter import (
    AbortController,
    Accept,
    AdditionalContext,
    Deny,
    ToolExecution,
    ToolRunContext,
    define_tool,
)
from dsh_jupyter.kernel import InProcessRuntime, KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.registry.pipeline import cancelled_call
from dsh_jupyter.runtime import CodeRuntime


class Probe:
    """Records how many bodies run at once and the order they start and finish."""

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.events: list[str] = []

    def tool(self, name: str, *, safe: bool, delay: float = 0.01) -> Any:
        async def body(args: Any, ctx: ToolRunContext) -> Any:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.events.append(f"start {name}{args.get('i', '')}")
            try:
                await asyncio.sleep(args.get("delay", delay))
            finally:
                self.active -= 1
            self.events.append(f"end {name}{args.get('i', '')}")
            return {"name": name, "i": args.get("i")}

        return define_tool(name=name, parameters={"type": "object"},
                           output={"schema": {"type": "object"}, "render": lambda a, v: str(v)},
                           execute=body, is_concurrency_safe=(lambda a: True) if safe else None)


@pytest.fixture(params=["in-process", pytest.param("kernel", marks=pytest.mark.kernel)])
async def code_runtime(request: pytest.FixtureRequest) -> AsyncIterator[CodeRuntime]:
    """The scheduling rules hold on both runtimes: the in-process test runtime shares the
    kernel's in-kernel core and host bridge, and this runs the same tests on a real
    kernel to keep it so."""
    if request.param == "in-process":
        yield InProcessRuntime()
        return
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        yield runtime


# --- scheduling ----------------------------------------------------------------------------


async def test_parallel_calls_overlap_up_to_the_limit(code_runtime: CodeRuntime) -> None:
    probe = Probe()
    registry = code_registry(code_runtime, max_parallel_sub_calls=3)
    registry.register(probe.tool("safe", safe=True))
    result = await run(registry, "await asyncio.gather(*(tools.safe({'i': i}) "
                                 "for i in range(7)))")
    assert not result.is_error, result
    assert probe.peak == 3
    starts = [e for e in probe.events if e.startswith("start")]
    assert starts == [f"start safe{i}" for i in range(7)]  # submission order


async def test_limit_of_one_restores_serial_dispatch(code_runtime: CodeRuntime) -> None:
    probe = Probe()
    registry = code_registry(code_runtime, max_parallel_sub_calls=1)
    registry.register(probe.tool("safe", safe=True))
    await run(registry, "await asyncio.gather(*(tools.safe({'i': i}) for i in range(4)))")
    assert probe.peak == 1


async def test_exclusive_call_is_a_barrier(code_runtime: CodeRuntime) -> None:
    probe = Probe()
    registry = code_registry(code_runtime)
    registry.register(probe.tool("safe", safe=True))
    registry.register(probe.tool("write", safe=False))
    code = """
await asyncio.gather(tools.safe({'i': 1}), tools.safe({'i': 2}), tools.write({'i': 3}),
                     tools.safe({'i': 4}), tools.safe({'i': 5}))
"""
    result = await run(registry, code)
    assert not result.is_error, result
    events = probe.events
    write_start, write_end = events.index("start write3"), events.index("end write3")
    # the pool drained before the exclusive call, and later calls waited for it
    assert {"end safe1", "end safe2"} <= set(events[:write_start])
    assert events[write_start + 1] == "end write3"
    assert {"start safe4", "start safe5"} <= set(events[write_end:])


async def test_pre_execute_stages_never_overlap_and_post_runs_in_order(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    registry.register(Probe().tool("safe", safe=True))
    active = {"pre": 0, "peak": 0}
    post_order: list[int] = []

    async def pre(execution: ToolExecution, decision: Any) -> None:
        if execution.name == "run_code":
            return
        active["pre"] += 1
        active["peak"] = max(active["peak"], active["pre"])
        await asyncio.sleep(0.005)
        active["pre"] -= 1

    async def post(execution: ToolExecution, result: Any) -> None:
        if execution.name != "run_code":
            post_order.append(execution.arguments["i"])  # type: ignore[arg-type]

    registry.on_pre_execute(pre)
    registry.on_post_execute(post)
    # later calls finish first: delays shrink with i
    code = ("await asyncio.gather(*(tools.safe({'i': i, 'delay': 0.05 - i * 0.01}) "
            "for i in range(5)))")
    result = await run(registry, code)
    assert not result.is_error, result
    assert active["peak"] == 1
    assert post_order == [0, 1, 2, 3, 4]


# --- results, failures, events ---------------------------------------------------------------


async def test_tool_failure_raises_tool_call_error_in_the_program(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    registry.register(echo())
    registry.on_pre_execute(lambda e, d: Deny("no echo today") if e.name == "echo" else None)
    code = """
try:
    await tools.echo({'text': 'x'})
except ToolCallError as exc:
    return [exc.tool_name, str(exc)]
"""
    result = await run(registry, code)
    assert result.value == {"logs": [], "result": ["echo", "no echo today"]}


async def test_bad_arguments_reject_one_call_and_consume_no_id(code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    registry.register(echo())
    ids: list[str] = []
    registry.on_event(lambda e: ids.append(e["call_id"]) if e["kind"] ==
                      "tool/code-dispatch-start" else None)
    code = """
try:
    await tools.echo({'text': float('nan')})
except ToolCallError as exc:
    print('rejected:', exc)
return await tools.echo({'text': 'ok'})
"""
    result = await run(registry, code, call_id="run7")
    assert not result.is_error, result
    assert ids == ["run7:code:1"]
    assert "not lossless JSON" in result.value["logs"][0]


async def test_events_pair_every_started_call(code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    registry.register(echo())
    events: list[dict[str, Any]] = []
    registry.on_event(lambda e: events.append(dict(e)))
    code = """
await tools.echo({'text': 'a'})
try:
    await tools.echo({})
except ToolCallError:
    pass
return 'done'
"""
    await run(registry, code)
    kinds = [(e["kind"], e["call_id"]) for e in events]
    assert kinds == [("tool/call", "r1"),
                     ("tool/code-dispatch-start", "r1:code:1"),
                     ("tool/code-dispatch-running", "r1:code:1"),
                     ("tool/code-dispatch", "r1:code:1"),
                     ("tool/code-dispatch-start", "r1:code:2"),
                     ("tool/code-dispatch", "r1:code:2"),  # invalid: never dispatched
                     ("tool/result", "r1")]
    settled = [e for e in events if e["kind"] == "tool/code-dispatch"]
    assert settled[0]["started"] <= settled[0]["running"] <= settled[0]["ended"]
    assert "running" not in settled[1]
    assert settled[0]["is_error"] is False and settled[0]["content"][0]["text"] == "a"
    assert settled[1]["is_error"] is True and settled[1]["error"]["code"] == "INVALID_ARGS"
    assert all(e["parent_call_id"] == "r1" and e["root_call_id"] == "r1" for e in settled)


async def test_failed_run_reports_kind_and_captured_output(code_runtime: CodeRuntime) -> None:
    result = await run(code_registry(code_runtime), "print('before')\nraise ValueError('boom')")
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    assert result.error.message.startswith("code run failed (exception): Traceback")
    assert "ValueError: boom" in result.error.message
    assert result.error.message.endswith("\nCaptured output:\nbefore")
    invalid = await run(code_registry(code_runtime), "return {1, 2}")
    assert invalid.error is not None
    assert invalid.error.message.startswith("code run failed (invalid-output)")
    assert "Captured output" not in invalid.error.message


async def test_sub_call_contexts_are_deferred_in_order_and_kept_on_failure(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    registry.register(Probe().tool("safe", safe=True))

    def post(execution: ToolExecution, result: Any) -> Any:
        if execution.name == "safe":
            return Accept(contexts=[AdditionalContext(source="p",
                                                      text=str(execution.arguments["i"]))])
        return None

    registry.on_post_execute(post)
    code = ("await asyncio.gather(*(tools.safe({'i': i, 'delay': 0.03 - i * 0.01}) "
            "for i in range(3)))\nraise RuntimeError('after')")
    result = await run(registry, code)
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    assert [c.text for c in result.additional_contexts] == ["0", "1", "2"]


async def test_outer_abort_aborts_in_flight_and_abandons_queued_calls(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    seen_signals: list[Any] = []
    running = asyncio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        seen_signals.append(ctx.signal)
        running.set()
        await ctx.signal.wait()
        return "stopped"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow))
    events: list[str] = []
    registry.on_event(lambda e: events.append(f"{e['kind']} {e.get('call_id')}"))
    controller = AbortController()
    code = ("print('before')\n"
            "await asyncio.gather(tools.slow({}), tools.slow({}), tools.slow({}))")
    task = asyncio.create_task(run(registry, code, signal=controller.signal))
    await running.wait()  # the first call runs; the other two wait behind it (or are on the way)
    controller.abort("user stop")
    result = await task
    # 000: an abort after invocation replaces only a success; the run's own failure stays
    # CODE_RUN_FAILED, kind abort, with the lines printed so far.
    assert result.error is not None and result.error.code == "CODE_RUN_FAILED"
    assert result.error.message == "code run failed (abort): user stop\nCaptured output:\nbefore"
    assert len(seen_signals) == 1 and seen_signals[0].aborted
    # the line printed before the calls, then one started sub-call, settled once; the two
    # queued ones left no events
    assert events == ["tool/call r1", "tool/code-output r1", "tool/code-dispatch-start r1:code:1",
                      "tool/code-dispatch-running r1:code:1",
                      "tool/code-dispatch r1:code:1", "tool/result r1"]


async def test_settlement_aborts_sub_calls_the_program_did_not_await(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    finished: list[str] = []

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        await ctx.signal.wait()
        finished.append(str(ctx.signal.reason))
        return "x"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow))
    events: list[str] = []
    registry.on_event(lambda e: events.append(e["kind"]))
    code = "asyncio.ensure_future(tools.slow({}))\nawait asyncio.sleep(0.01)\nreturn 'early'"
    result = await run(registry, code)
    assert result.value == {"logs": [], "result": "early"}
    assert finished == ["run_code settled"]
    assert events[-2:] == ["tool/code-dispatch", "tool/result"]  # landed before return


async def test_cancelling_the_outer_task_settles_sub_calls(code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    stopped: list[str] = []
    started = asyncio.Event()

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        try:
            await ctx.signal.wait()
        finally:
            stopped.append(str(ctx.signal.reason))
        return "x"

    registry.register(define_tool(name="slow", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=slow))
    events: list[str] = []
    registry.on_event(lambda e: events.append(e["kind"]))
    task = asyncio.create_task(run(registry, "print('before')\nawait tools.slow({})"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as raised:
        await task
    # The cancellation stopped the program as an abort: the sub-call saw why, and the
    # published result (carried by the CancelledError) kept what the program printed.
    assert stopped == ["the call was cancelled"]
    assert [e for e in events if e != "tool/code-output"] == [
        "tool/call", "tool/code-dispatch-start", "tool/code-dispatch-running",
        "tool/code-dispatch", "tool/result"]
    stopped_call = cancelled_call(raised.value)
    assert stopped_call is not None and stopped_call.name == "run_code"
    assert stopped_call.result.error is not None
    assert stopped_call.result.error.message == (
        "code run failed (abort): the call was cancelled\nCaptured output:\nbefore")


async def test_cancelling_the_outer_task_cancels_a_sub_call_that_ignores_its_signal(
        code_runtime: CodeRuntime) -> None:
    registry = code_registry(code_runtime)
    seen: list[str] = []
    started = asyncio.Event()

    async def sleepy(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        try:
            await asyncio.sleep(30)  # never looks at ctx.signal
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "slept"

    registry.register(define_tool(name="sleepy", parameters={"type": "object"},
                                  output={"schema": {"type": "string"},
                                          "render": lambda a, v: str(v)},
                                  execute=sleepy))
    task = asyncio.create_task(run(registry, "return await tools.sleepy({})"))
    await started.wait()
    task.cancel()
    async with asyncio.timeout(5):  # the sub-call used to hold the run for its 30 s
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
    assert seen == ["cancelled"]
    stopped = cancelled_call(raised.value)
    assert stopped is not None and stopped.result.error is not None
    assert stopped.result.error.message.startswith("code run failed (abort): the call was "
                                                   "cancelled")


async def test_the_tools_namespace_is_the_same_on_both_runtimes(
        code_runtime: CodeRuntime) -> None:
    """Keyword calls, item access and unknown names behave alike (the in-process runtime
    runs the in-kernel core)."""
    registry = code_registry(code_runtime)
    registry.register(echo())
    code = """
out = [await tools.echo(text='kw'), await tools['echo']({'text': 'item'})]
for probe in (lambda: tools.nope, lambda: tools['nope']):
    try:
        probe()
    except (AttributeError, KeyError) as error:
        out.append(type(error).__name__)
return out
"""
    result = await run(registry, code)
    assert result.value == {"logs": [], "result": ["kw", "item", "AttributeError", "KeyError"]}


async def test_a_wrong_call_says_to_pass_one_dict_and_shows_the_signature(
        code_runtime: CodeRuntime) -> None:
    """Positional arguments, a value that is not a dict, or a dict and keywords call
    nothing and raise one line: the tool takes one dict, and the dict it takes."""
    registry = code_registry(code_runtime)

    @registry.tool
    async def add(a: int, b: int, note: str = "") -> int:
        "Add two integers."
        return a + b

    registry.register(define_tool(
        name="my-echo", description="Echo.", execute=lambda args, ctx: args,
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
        output={"schema": {"type": "object"}, "render": lambda a, v: str(v)}))
    starts: list[str] = []
    registry.on_event(lambda e: starts.append(e["call_id"]) if e["kind"] ==
                      "tool/code-dispatch-start" else None)
    code = """
out = []
for call in (lambda: tools.add(1, 2), lambda: tools.add([1, 2]),
             lambda: tools.add({"a": 1}, b=2), lambda: tools["my-echo"]("hi")):
    try:
        await call()
    except TypeError as error:
        out.append(str(error))
return out + [await tools.add(a=1, b=2)]
"""
    result = await run(registry, code)
    add_usage = ('tools.add takes one dict of arguments: '
                 'await tools.add({"a": int, "b": int, "note": NotRequired[str]})')
    assert result.value == {"logs": [], "result": [
        add_usage, add_usage, add_usage,
        'tools["my-echo"] takes one dict of arguments: '
        'await tools["my-echo"]({"text": NotRequired[str]})', 3]}
    assert starts == ["r1:code:1"]  # only the keyword call was made
    failed = await run(registry, "await tools.add(1, 2)", call_id="r2")
    assert failed.error.code == "CODE_RUN_FAILED"
    assert failed.error.message.endswith(f"\nTypeError: {add_usage}")


async def test_a_syntax_error_names_the_program_line_and_no_host_path(
        code_runtime: CodeRuntime) -> None:
    result = await run(code_registry(code_runtime), "print('a')\nx = (")
    assert result.error is not None
    message = result.error.message
    assert message.startswith('code run failed (exception):   File "<program>", line 2')
    assert "SyntaxError: '(' was never closed" in message
    assert "ast.py" not in message and "Traceback" not in message and "/" not in message


@pytest.fixture
async def kernel_runtime() -> AsyncIterator[KernelRuntime]:
    async with KernelRuntime(KernelRuntimeConfig(pool_size=1)) as runtime:
        yield runtime


@pytest.mark.kernel
@pytest.mark.timeout(90)
async def test_a_plot_reaches_the_model_only_when_asked(kernel_runtime: KernelRuntime) -> None:
    program = "import matplotlib.pyplot as plt\nprint('plotted')\nplt.plot([1, 2, 3])"
    off = await run(code_registry(kernel_runtime), program)
    on = await run(code_registry(kernel_runtime, run_code_images=True), program)
    assert off.value == {"logs": ["plotted"]}
    assert off.content == ({"type": "text", "text": "plotted"},)
    text, image = on.content
    assert text == off.content[0]  # the model reads the same text either way
    assert image["type"] == "image" and image["mime_type"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    assert on.value == {"logs": ["plotted"],
                        "images": [{"mime_type": "image/png", "data": image["data"]}]}
