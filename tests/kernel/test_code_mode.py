"""Code Mode above the runtime seam: modes, prompt assembly, collapse, run_code,
scheduling, events and rendering (with the in-process test runtime)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Collection
from typing import Any

import pytest

from dsh_jupyter import (
    AbortController,
    Accept,
    AdditionalContext,
    Deny,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    define_tool,
)
from dsh_jupyter.codemode.run_code import (
    RUN_CODE_MAX_IMAGES,
    model_images,
    render_result_value,
    run_code_output,
)
from dsh_jupyter.errors import CodeModeError, RegistrationError
from dsh_jupyter.json_value import JsonValue, snapshot_json
from dsh_jupyter.kernel import KernelRuntime, KernelRuntimeConfig
from dsh_jupyter.registry.pipeline import cancelled_call
from dsh_jupyter.runtime import (
    CodeRunResult,
    CodeRuntime,
    Display,
    RunFile,
    RunRequest,
    RuntimeInfo,
)
from dsh_jupyter.testing import InProcessRuntime


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


def code_registry(runtime: CodeRuntime | None = None, **kw: Any) -> ToolRegistry:
    return ToolRegistry(mode=kw.pop("mode", "code"),
                        code_runtime=runtime if runtime is not None else InProcessRuntime(),
                        **kw)


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


async def run(registry: ToolRegistry, code: str, **kw: Any) -> Any:
    return await registry.execute(ToolCall(call_id=kw.pop("call_id", "r1"), name="run_code",
                                           arguments={"code": code, "description": "test"},
                                           **kw))


def echo() -> Any:
    return define_tool(name="echo", description="Echo text.",
                       parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"]},
                       output={"schema": {"type": "string"}, "render": lambda a, v: str(v)},
                       execute=lambda args, ctx: args["text"])


# --- modes and prompt assembly --------------------------------------------------------


def test_mode_contributions_and_sections() -> None:
    native = ToolRegistry(code_runtime=InProcessRuntime())
    native.register(echo())
    prompt = native.prompt()
    assert [t["name"] for t in prompt.tools] == ["echo"] and prompt.sections == ()

    code = code_registry()
    code.register(echo())
    prompt = code.prompt()
    assert [t["name"] for t in prompt.tools] == ["run_code"]
    assert [(s.id, s.order) for s in prompt.sections] == [("tools:code-only", 99),
                                                           ("tools:sdk", 150)]
    rule = prompt.section("tools:code-only")
    assert rule is not None and "Only `run_code`" in rule.text
    sdk = prompt.section("tools:sdk")
    assert sdk is not None and "async def echo(self, args: EchoArgs) -> str" in sdk.text
    parameters = prompt.tools[0]["parameters"]
    assert isinstance(parameters, dict) and parameters["required"] == ["code", "description"]

    both = code_registry(mode="both")
    both.register(echo())
    prompt = both.prompt()
    assert [t["name"] for t in prompt.tools] == ["echo", "run_code"]
    rule = prompt.section("tools:code-only")
    assert rule is not None and rule.text == ""
    assert [s["name"] for s in both.schemas()] == ["echo"]  # the catalog is unchanged


def test_present_as_nearest_declaration_wins() -> None:
    registry = ToolRegistry(code_runtime=InProcessRuntime())
    registry.register(echo())
    parent = registry.scope("parent")
    child = registry.scope("child", parent=parent)
    parent.present_as("code")
    assert registry.mode_for(child) == "code"
    child.present_as("both")
    assert registry.mode_for(child) == "both"
    assert registry.mode_for(None) == "native"
    assert [t["name"] for t in registry.prompt(child).tools] == ["echo", "run_code"]


def test_code_mode_without_runtime_fails_loudly() -> None:
    registry = ToolRegistry(mode="code")
    with pytest.raises(CodeModeError, match="needs a code runtime"):
        registry.prompt()

    class Lisp(InProcessRuntime):
        info = RuntimeInfo(language="lisp", isolation="in-process")

    registry = ToolRegistry(mode="code", code_runtime=Lisp())
    with pytest.raises(CodeModeError, match="no SDK renderer"):
        registry.prompt()


def test_sdk_section_is_deterministic() -> None:
    first, second = code_registry(), code_registry()
    tools = [echo(), define_tool(name="zeta", parameters={"type": "object"},
                                 output={"schema": {"type": "string"},
                                         "render": lambda a, v: str(v)},
                                 execute=lambda a, c: "")]
    for t in tools:
        first.register(t)
    for t in reversed(tools):
        second.register(t)
    assert first.prompt().system_text == second.prompt().system_text


# --- collapse ------------------------------------------------------------------------------


async def test_code_mode_collapses_direct_calls_before_policy() -> None:
    registry = code_registry()
    registry.register(echo())
    seen: list[str] = []
    registry.on_pre_execute(lambda e, d: seen.append(e.name))
    result = await registry.execute(ToolCall(call_id="c1", name="echo",
                                             arguments={"text": "x"}))
    assert result.error is not None and result.error.code == "UNKNOWN_TOOL"
    assert "only `run_code` is callable directly" in result.error.message
    assert "call `echo` from inside a `run_code` program" in result.error.message
    assert seen == []
    # SDK sub-calls carry a parent token and are exempt
    ok = await run(registry, "return await tools.echo({'text': 'via sdk'})")
    assert not ok.is_error and ok.value == {"logs": [], "result": "via sdk"}
    assert seen == ["run_code", "echo"]


async def test_both_mode_executes_native_calls() -> None:
    registry = code_registry(mode="both")
    registry.register(echo())
    result = await registry.execute(ToolCall(call_id="c1", name="echo",
                                             arguments={"text": "x"}))
    assert result.value == "x"


async def test_run_code_is_unknown_under_native() -> None:
    registry = ToolRegistry(code_runtime=InProcessRuntime())
    result = await run(registry, "return 1")
    assert result.error is not None and result.error.code == "UNKNOWN_TOOL"


@pytest.mark.parametrize("arguments", [{"code": "return 1"}, {"code": "return 1",
                                                                  "description": "  "},
                                        {"code": 1, "description": "d"}])
async def test_run_code_arguments_are_validated(arguments: dict[str, Any]) -> None:
    registry = code_registry()
    result = await registry.execute(ToolCall(call_id="c", name="run_code", arguments=arguments))
    assert result.error is not None and result.error.code == "INVALID_ARGS"


def test_run_code_call_card() -> None:
    registry = code_registry()
    definition = registry.get("run_code")
    assert definition is not None and definition.present_call is not None
    view = definition.present_call({"code": "print(1)", "description": "Print one"})
    assert view is not None and view.title == "Print one"
    assert view.kind == "execute" and view.raw_input == "print(1)"  # type: ignore[union-attr]


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


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("print('a'); print('b'); return 'raw string'", "a\nb\nraw string"),
        ("return {'k': [1, 2]}", '{\n  "k": [\n    1,\n    2\n  ]\n}'),
        ("return {'a': {'b': {'c': {'d': {'e': {'f': 1}}}}}}",
         '{\n  "a": {\n    "b": {\n      "c": {\n        "d": {\n          "e": {"f": 1}\n'
         '        }\n      }\n    }\n  }\n}'),
        ("x = 1", "(run_code completed with no output)"),
        ("print('partial', end='')", "partial"),
    ],
)
async def test_result_rendering(code: str, text: str) -> None:
    result = await run(code_registry(), code)
    assert not result.is_error, result
    assert result.text == text


class RenderedCall:
    """What an output declaration sees of a call (``OutputCall``), for one call."""

    def __init__(self) -> None:
        self.arguments: dict[str, JsonValue] = {}
        self.attachments: list[RunFile] = []
        self.state: dict[object, Any] = {}


async def test_result_is_rendered_once_for_content_and_meta() -> None:
    calls: list[JsonValue] = []

    def render(value: JsonValue) -> str:
        calls.append(value)
        return render_result_value(value)

    output = run_code_output(render_result=render)
    value = snapshot_json({"logs": ["a"], "result": {"k": [1, 2]}})
    call = RenderedCall()
    content = output.render_for(call, value)
    meta = output.meta_for(call, value)
    assert len(calls) == 1
    assert content == ({"type": "text", "text": 'a\n{\n  "k": [\n    1,\n    2\n  ]\n}'},)
    assert meta == {"logs": ["a"], "result": '{\n  "k": [\n    1,\n    2\n  ]\n}'}
    assert call.state == {}  # taken: the call holds the value no longer
    # An equal value that is not the one just rendered (a replaced value) renders again,
    # and so does the meta of another call.
    output.render_for(call, value)
    assert output.meta_for(call, snapshot_json({"logs": [], "result": {"k": [1, 2]}}))
    assert output.meta_for(RenderedCall(), value)
    assert len(calls) == 4


@pytest.mark.parametrize("code", ["return [{'i': i, 'sq': [i, i * i]} for i in range(3000)]",
                                  "return {'k': [1, 2]}"])
async def test_run_code_meta_shares_the_content_rendering(code: str) -> None:
    result = await run(code_registry(), code)
    assert not result.is_error, result
    text = result.content[0]["text"]
    assert text == render_result_value(result.value["result"])
    # Rendered once: the meta holds the very string the content holds.
    assert result.meta == {"logs": [], "result": text} and result.meta["result"] is text


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


async def test_pre_aborted_run_code_never_starts_the_runtime() -> None:
    runtime = InProcessRuntime()
    registry = ToolRegistry(mode="code", code_runtime=runtime)
    controller = AbortController()
    controller.abort("no")
    result = await run(registry, "return 1", signal=controller.signal)
    assert result.error is not None and result.error.code == "ABORTED_BEFORE_DISPATCH"
    assert runtime.runs == 0


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


async def test_a_wrong_call_under_discovery_points_at_describe() -> None:
    registry = code_registry(mode="discovery")
    registry.register(echo())
    result = await run(registry, "try:\n    await tools.echo('hi')\n"
                                 "except TypeError as error:\n    return str(error)")
    assert result.value["result"] == ('tools.echo takes one dict of arguments: await '
                                      'tools.echo({...}); tools.describe("echo") shows its '
                                      'fields')


async def test_a_syntax_error_names_the_program_line_and_no_host_path(
        code_runtime: CodeRuntime) -> None:
    result = await run(code_registry(code_runtime), "print('a')\nx = (")
    assert result.error is not None
    message = result.error.message
    assert message.startswith('code run failed (exception):   File "<program>", line 2')
    assert "SyntaxError: '(' was never closed" in message
    assert "ast.py" not in message and "Traceback" not in message and "/" not in message


# --- images to the model (run_code_images) ---------------------------------------------

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4z8AARAAI/gH/xp559wAAAABJ"
       "RU5ErkJggg==")
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()


def shown(data: dict[str, JsonValue]) -> Display:
    return Display(data=data, metadata={}, after_logs=0)


class Displaying:
    """A code runtime whose every run prints ``logs`` and shows ``displays`` (the
    registry's side of images, without a kernel)."""

    info = RuntimeInfo(isolation="in-process")

    def __init__(self, logs: Collection[str], displays: Collection[Display]) -> None:
        self.result = CodeRunResult(logs=tuple(logs), displays=tuple(displays))

    async def run(self, request: RunRequest) -> CodeRunResult:
        request.bindings.close("done")
        return self.result


def test_run_code_images_must_be_a_bool() -> None:
    with pytest.raises(RegistrationError, match="run_code_images"):
        ToolRegistry(run_code_images=1)  # type: ignore[arg-type]


async def test_without_the_option_no_image_reaches_the_model() -> None:
    runtime = Displaying(["a"], [shown({"image/png": PNG, "text/plain": "p"})])
    result = await run(code_registry(runtime), "pass")
    assert result.value == {"logs": ["a"]}
    assert result.content == ({"type": "text", "text": "a"},)


async def test_images_follow_the_text_first_four_only() -> None:
    displays = [shown({"text/html": "<b>no image</b>", "text/plain": "h"}),
                shown({"image/png": "not base64!", "text/plain": "fake"}),
                shown({"image/gif": "R0lGODlh", "text/plain": "gif: not sent"}),
                *(shown({"image/png": PNG, "text/plain": str(i)}) for i in range(4)),
                shown({"image/jpeg": JPEG, "text/plain": "fifth"}),
                shown({"image/png": PNG, "text/plain": "sixth"})]
    result = await run(code_registry(Displaying(["a"], displays), run_code_images=True), "x")
    assert not result.is_error, result
    assert result.value == {"logs": ["a"], "images_omitted": 2,
                            "images": [{"mime_type": "image/png", "data": PNG}] * 4}
    text, *images = result.content
    assert text == {"type": "text", "text": f"a\n(2 more images not attached: at most "
                    f"{RUN_CODE_MAX_IMAGES} per run)"}
    assert images == [{"type": "image", "data": PNG, "mime_type": "image/png"}] * 4


async def test_images_without_text_say_so() -> None:
    runtime = Displaying([], [shown({"image/jpeg": JPEG, "image/png": "x"})])
    result = await run(code_registry(runtime, run_code_images=True), "x")
    assert result.content == (
        {"type": "text", "text": "(run_code completed with no text output; 1 image attached)"},
        {"type": "image", "data": JPEG, "mime_type": "image/jpeg"})
    assert model_images((shown({"image/png": PNG, "image/jpeg": JPEG}),)) == [
        {"mime_type": "image/png", "data": PNG}]


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
